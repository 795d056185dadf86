"""Compare two numerics dumps: align their records, measure every tensor, give one verdict and the first divergence.

Three verdicts, in the order a user needs them:

1. absolute — every aligned tensor against dtype-aware tolerances; parameters and
   model inputs are reported on their own first, so a changed weight is found at
   its source rather than in everything downstream of it;
2. first divergence — the first record in execution order whose output fails while
   its inputs agree (for a parameter or input: the first that fails). When the
   first failing op's inputs already differ, the cause is an op only one side ran
   that changed values (dropout left on, an extra scale), and that op is named;
3. op-local replay — with full tensors, the first divergent op is re-run in
   float64 on the CPU to tell an op bug from accumulated drift.

Both dumps are streamed: the manifest a record at a time, tensors a chunk at a
time, rows spooled to a temporary file. Memory does not grow with the dump.
"""

from __future__ import annotations

import heapq
import json
import math
import tempfile
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accelport.verify.numerics import align, dumpfile, metrics
from accelport.verify.numerics.metrics import TensorDiff, TensorFiles, Tolerance

_CACHE_LIMIT = 100_000


@dataclass
class CompareOptions:
    mapping: str | Path | None = None
    tolerances: dict[str, tuple[float, float]] = field(
        default_factory=dict
    )  # dtype or "*" -> (rtol, atol)
    criterion: str = "norm"  # for op outputs; parameters and inputs always use "max" (see metrics)
    # With full tensors: "failing" replays each op that fails while its inputs agree (drift or
    # bug?), "all" replays every op (finds bugs smaller than the tolerance), "none" never replays.
    replay: str = "failing"
    replay_ratio: float | None = None
    allow_truncated: bool = False
    # Records beyond tolerance that replay explains as accumulated drift pass by default
    # (counted and shown); with fail_on_drift they fail the verdict too.
    fail_on_drift: bool = False
    window: int = 2048
    top: int = 25
    threads: int = 2


@dataclass
class CompareResult:
    """The outcome of `compare_dumps`: verdict, first divergence, summaries, and all rows (spooled)."""

    ref: Path
    test: Path
    passed: bool
    reasons: list[str]
    truncated: dict[str, Any]
    counts: dict[str, int]
    first_divergence: dict[str, Any] | None
    params: dict[str, Any]
    inputs: dict[str, Any]
    worst: list[dict[str, Any]]
    modules: list[dict[str, Any]]
    only: dict[str, list[dict[str, Any]]]
    modes: dict[str, str]
    environment: dict[str, Any]
    options: dict[str, Any]
    seconds: float
    bytes_read: int
    drift: dict[str, Any] = field(default_factory=lambda: {"count": 0, "fails": False, "first": None})
    _spool: Any = None

    @property
    def verdict(self) -> str:
        return "pass" if self.passed else "fail"

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON (non-finite numbers as the strings 'inf', '-inf', 'nan')."""
        return dumpfile.json_safe(self._data())

    def _data(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "reasons": self.reasons,
            "ref": str(self.ref),
            "test": str(self.test),
            "modes": self.modes,
            "truncated": self.truncated,
            "counts": self.counts,
            "first_divergence": self.first_divergence,
            "drift": self.drift,
            "params": self.params,
            "inputs": self.inputs,
            "worst": self.worst,
            "modules": self.modules,
            "only": self.only,
            "environment": self.environment,
            "options": self.options,
            "seconds": round(self.seconds, 3),
            "bytes_read": self.bytes_read,
        }

    def rows(self) -> Iterator[dict[str, Any]]:
        """Every aligned row, in execution order (read back from the spool file)."""
        if self._spool is None:
            return
        self._spool.seek(0)
        for line in self._spool:
            yield json.loads(line)

    def close(self) -> None:
        if self._spool is not None:
            self._spool.close()
            self._spool = None

    def __enter__(self) -> CompareResult:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _identity(record: Mapping[str, Any] | None) -> dict[str, Any]:
    if record is None:
        return {}
    return {
        "kind": record.get("k"),
        "step": record.get("step"),
        "phase": record.get("phase"),
        "module": record.get("module"),
        "op": record.get("op"),
        "call_index": record.get("call"),
        "source_line": record.get("line"),
    }


class _Comparer:
    def __init__(self, ref: Path, test: Path, options: CompareOptions) -> None:
        self.ref_path, self.test_path = Path(ref), Path(test)
        self.options = options
        self.mapping = align.Mapping.load(options.mapping)
        self.ref_info = dumpfile.open_dump(self.ref_path)
        self.test_info = dumpfile.open_dump(self.test_path)
        self.ref_files = TensorFiles(self.ref_path)
        self.test_files = TensorFiles(self.test_path)
        defaults = metrics.defaults()
        self.replay_ratio = options.replay_ratio or float(defaults["compare"]["replay_ratio"])
        self.cache: OrderedDict[tuple, TensorDiff] = OrderedDict()
        self.pool = ThreadPoolExecutor(max_workers=options.threads) if options.threads > 1 else None
        self.spool = tempfile.TemporaryFile("w+", encoding="utf-8")  # noqa: SIM115 - owned by the result, closed by its close()
        self.counts = {
            k: 0
            for k in (
                "rows",
                "matched",
                "only_ref",
                "only_test",
                "failed",
                "tensors",
                "after_truncation",
                "benign_extra",
                "replayed",
                "op_bugs",
                "drift",
            )
        }
        self.worst: list[tuple[float, int, dict[str, Any]]] = []
        self.modules: dict[str, dict[str, Any]] = {}
        self.params = {"checked": 0, "failed": []}
        self.inputs = {"checked": 0, "failed": []}
        self.only: dict[str, list[dict[str, Any]]] = {"ref": [], "test": []}
        self.first: dict[str, Any] | None = None
        self.first_drift: dict[str, Any] | None = None
        self.first_pair: tuple[dict[str, Any], dict[str, Any]] | None = None
        # (step, row) of the first op only one side ran that changed values, this step.
        self.candidate: tuple[int, dict[str, Any]] | None = None
        # Autocast dtypes seen in either run: every tensor of a mixed-precision run carries that
        # dtype's rounding (even those stored in float32), so its tolerance applies throughout.
        self.amp_by_side: dict[str, set[str]] = {"ref": set(), "test": set()}
        self.amp: tuple[str, ...] = ()
        self.explained: set[tuple] = set()  # REF tensors whose difference replay showed to be drift

    # -- tensors -----------------------------------------------------------------------------

    def _tensor(
        self,
        r: Mapping[str, Any],
        t: Mapping[str, Any],
        leaf: bool = False,
        exact_bits: bool = False,
    ) -> TensorDiff:
        criterion = "max" if leaf and self.options.criterion == "norm" else self.options.criterion
        diff = self._tensor_diff(r, t, criterion)
        if exact_bits and diff.passed and r["dtype"] == t["dtype"]:
            # Where both runs must start alike (parameters before the first update, model
            # inputs), any change of bits is a difference at the source.
            if (
                r.get("crc32") is not None
                and t.get("crc32") is not None
                and r["crc32"] != t["crc32"]
            ):
                return TensorDiff(
                    False,
                    max(diff.score, 1.0),
                    "bits differ (CRC-32) although both runs must start from the same values",
                    "checksum",
                    diff.metrics,
                )
            if diff.source == "tensor" and diff.metrics.get("max_abs", 0.0) > 0:
                return TensorDiff(
                    False,
                    max(diff.score, 1.0),
                    f"values differ (max |diff| {diff.metrics['max_abs']:.3g}) although both runs must start from the same values",
                    "tensor",
                    diff.metrics,
                )
        return diff

    def _tensor_diff(
        self, r: Mapping[str, Any], t: Mapping[str, Any], criterion: str
    ) -> TensorDiff:
        if r.get("stats") is None or t.get("stats") is None:
            if r.get("uninitialised") or t.get("uninitialised"):
                return TensorDiff(True, 0.0, "", "uninitialised")
            if r.get("stats") is None and t.get("stats") is None:
                return TensorDiff(True, 0.0, "", "none")
        problem = metrics.shape_problem(r, t)
        if problem:
            return TensorDiff(False, math.inf, problem, "shape")
        tol = metrics.tolerance_for(r["dtype"], t["dtype"], self.options.tolerances, self.amp)
        if (
            r.get("crc32") is not None
            and r.get("crc32") == t.get("crc32")
            and r["dtype"] == t["dtype"]
        ):
            return TensorDiff(
                True, 0.0, "", "checksum", {"max_abs": 0.0, "cosine": 1.0, "allclose": 1.0}
            )
        if (
            "file" in r
            and "file" in t
            and r["dtype"] in dumpfile.DTYPES
            and t["dtype"] in dumpfile.DTYPES
        ):
            key = (
                r["file"],
                r["start"],
                t["file"],
                t["start"],
                r["dtype"],
                t["dtype"],
                criterion,
                tol,
            )
            hit = self.cache.get(key)
            if hit is not None:
                self.cache.move_to_end(key)
                return hit
            diff = self._tensor_full(r, t, tol, criterion)
            self.cache[key] = diff
            if len(self.cache) > _CACHE_LIMIT:
                self.cache.popitem(last=False)
            return diff
        if r.get("stats") is None or t.get("stats") is None:
            return TensorDiff(False, math.inf, "statistics missing on one side", "stats")
        return metrics.compare_stats(r, t, tol, criterion)

    def _tensor_full(
        self, r: Mapping[str, Any], t: Mapping[str, Any], tol: Tolerance, criterion: str
    ) -> TensorDiff:
        self.counts["tensors"] += 1
        return metrics.compare_tensors(
            self.ref_files, r, self.test_files, t, tol, criterion, self.pool
        )

    # -- one aligned pair --------------------------------------------------------------------

    def _value_changing(self, record: Mapping[str, Any]) -> tuple[bool, str]:
        """Does an op only one side ran change values (as opposed to casting, copying, viewing)?"""
        if record.get("k") in ("param", "input", "grad"):
            return True, f"{record.get('k')} present on one side only"
        outs = [o for o in record.get("out", []) if o.get("stats") is not None]
        if not outs:
            return False, "creates or returns nothing to compare"
        out = outs[0]
        size = math.prod(out.get("shape", []))
        for candidate in record.get("in", []):
            if candidate.get("stats") is None or math.prod(candidate.get("shape", [])) != size:
                continue
            tol = metrics.tolerance_for(
                candidate["dtype"], out["dtype"], self.options.tolerances, self.amp
            )
            diff = metrics.compare_stats({**candidate, "shape": out["shape"]}, out, tol, "max")
            if diff.passed:
                return False, "keeps its input's values (cast, copy or view)"
            return True, f"output differs from its input: {diff.reason}"
        if any(i.get("uninitialised") for i in record.get("in", [])):
            return True, "fills a new tensor"
        return True, "output computed from other inputs"

    def _row(
        self, ref: Mapping[str, Any] | None, test: Mapping[str, Any] | None, beyond_truncation: bool
    ) -> dict[str, Any]:
        base = ref if ref is not None else test
        assert base is not None
        row: dict[str, Any] = _identity(base)
        if test is not None and ref is not None:
            row["call_index_test"] = test.get("call")
            row["source_line_test"] = test.get("line")
        row["seq_ref"] = ref.get("seq") if ref else None
        row["seq_test"] = test.get("seq") if test else None
        if ref is None or test is None:
            side = "ref" if ref is not None else "test"
            record = ref if ref is not None else test
            assert record is not None
            if beyond_truncation:
                row["status"] = "not_compared"
                row["reason"] = "the other dump is truncated before this record"
                return row
            changing, why = self._value_changing(record)
            row["status"] = f"only_{side}"
            row["changes_values"] = changing
            row["reason"] = why
            out = (record.get("out") or [{}])[0]
            row["dtype_ref" if side == "ref" else "dtype_test"] = out.get("dtype")
            row["shape"] = out.get("shape")
            return row
        # A fused record stands for several ops: its first input and first output are what
        # the two sides share (a fused kernel also returns its saved statistics).
        fused = bool(ref.get("fused_from") or test.get("fused_from"))
        if fused:
            ref = {**ref, "in": ref.get("in", [])[:1], "out": ref.get("out", [])[:1]}
            test = {**test, "in": test.get("in", [])[:1], "out": test.get("out", [])[:1]}
        in_diffs = []
        for r_in, t_in in zip(ref.get("in", []), test.get("in", []), strict=False):
            in_diffs.append(self._tensor(r_in, t_in, leaf=r_in.get("src") is None))
        same_count = len(ref.get("in", [])) == len(test.get("in", []))
        inputs_ok = all(d.passed for d in in_diffs) and same_count
        # Inputs that fail only because an earlier op's difference was shown to be drift.
        inputs_drift = same_count and all(
            d.passed or _data_key(r_in) in self.explained
            for d, r_in in zip(in_diffs, ref.get("in", []), strict=False)
        )
        out_diffs = []
        r_out, t_out = ref.get("out", []), test.get("out", [])
        leaf = ref.get("k") in ("input", "param")
        exact = ref.get("k") == "input" or (ref.get("k") == "param" and ref.get("step") == 0)
        for r_o, t_o in zip(r_out, t_out, strict=False):
            out_diffs.append(self._tensor(r_o, t_o, leaf=leaf, exact_bits=exact))
        failed = [d for d in out_diffs if not d.passed]
        drawn = _random_difference(ref, test)
        if drawn is not None:
            # A random op is judged by the bits it drew: two masks of one rate have nearly the same statistics.
            row["random_stream"] = True
            seen = out_diffs[0].metrics if out_diffs else {}
            failed.insert(0, TensorDiff(False, max(1.0, *(d.score for d in out_diffs)), drawn, "random", seen))
        if len(r_out) != len(t_out):
            failed.append(
                TensorDiff(False, math.inf, f"{len(r_out)} outputs vs {len(t_out)}", "shape")
            )
        worst = max(failed + out_diffs, key=lambda d: d.score, default=TensorDiff(True, 0.0))
        row["status"] = "fail" if failed else "pass"
        row["inputs_ok"] = inputs_ok
        row["score"] = worst.score
        row["reason"] = worst.reason
        row["source"] = worst.source
        row["metrics"] = worst.metrics
        first_out = (r_out or [{}])[0], (t_out or [{}])[0]
        row["dtype_ref"], row["dtype_test"] = first_out[0].get("dtype"), first_out[1].get("dtype")
        row["shape"] = first_out[0].get("shape")
        if (
            ref.get("args") != test.get("args")
            and ref.get("k") == "op"
            and not (ref.get("fused_from") or test.get("fused_from"))
        ):
            row["args_ref"], row["args_test"] = ref.get("args"), test.get("args")
        if not inputs_ok:
            bad = [i for i, d in enumerate(in_diffs) if not d.passed]
            row["inputs_failed"] = bad
        replayable = ref.get("k") == "op" and _has_tensors(ref) and _has_tensors(test)
        wanted = self.options.replay == "all" or (
            self.options.replay == "failing"
            and row["status"] == "fail"
            and (inputs_ok or inputs_drift)
        )
        if replayable and wanted:
            from accelport.verify.numerics.replay import replay

            found = replay(ref, test, self.ref_files, self.test_files, self.replay_ratio)
            if found.get("status") == "done":
                self.counts["replayed"] += 1
                row["replay"] = found.get("verdict")
                if found.get("verdict") == "op":
                    row["status"] = "fail"
                    row["op_bug"] = found
                    row["reason"] = found["summary"]
                    row["score"] = max(row["score"], 1.0)
                elif row["status"] == "fail" and (inputs_ok or inputs_drift):
                    # Beyond tolerance, but TEST's op is as exact as a correct kernel in its dtype and its
                    # inputs agree: the op amplified its inputs' (allowed) difference. Not a failure.
                    row["status"] = "drift"
                    row["reason"] = f"{row['reason']}; explained: {found['summary']}"
                    for r_o in r_out:
                        self.explained.add(_data_key(r_o))
        elif (
            row["status"] == "fail"
            and inputs_drift
            and not inputs_ok
            and ref.get("op") in _SAME_VALUES_OPS
        ):
            # A view or copy of a tensor already shown to be drift.
            row["status"] = "drift"
            for r_o in r_out:
                self.explained.add(_data_key(r_o))
        return row

    # -- the walk ----------------------------------------------------------------------------

    def run(self) -> CompareResult:
        started = time.monotonic()
        ref_records = align.fuse(
            dumpfile.iter_records(self.ref_path, self.ref_info), self.mapping.fused_ref
        )
        test_records = align.fuse(
            (
                self.mapping.rename_test(r)
                for r in dumpfile.iter_records(self.test_path, self.test_info)
            ),
            self.mapping.fused_test,
        )
        ref_records = self._track_steps(ref_records, "ref")
        test_records = self._track_steps(test_records, "test")
        index = 0
        current_step = None
        for ref, test in align.align(ref_records, test_records, self.options.window):
            base = ref if ref is not None else test
            assert base is not None
            if base.get("step") != current_step:
                current_step = base.get("step")
                self.candidate = None
            beyond = (test is None and self.test_info.truncated) or (
                ref is None and self.ref_info.truncated
            )
            row = self._row(ref, test, beyond)
            row["row"] = index
            index += 1
            self._account(row, ref, test)
            self.spool.write(
                json.dumps(row, separators=(",", ":"), default=dumpfile.json_default) + "\n"
            )
        self.counts["rows"] = index
        return self._result(time.monotonic() - started)

    def _track_steps(
        self, records: Iterator[dict[str, Any]], side: str
    ) -> Iterator[dict[str, Any]]:
        """Drop step records from the stream, remembering each side's mixed-precision policy."""
        for record in records:
            if record.get("k") == "step":
                for dtype in (record.get("autocast") or {}).values():
                    self.amp_by_side[side].add(dtype)
                self.amp = tuple(sorted(self.amp_by_side["ref"] | self.amp_by_side["test"]))
                continue
            yield record

    def _account(
        self, row: dict[str, Any], ref: Mapping[str, Any] | None, test: Mapping[str, Any] | None
    ) -> None:
        status = row["status"]
        if status == "not_compared":
            self.counts["after_truncation"] += 1
            return
        if status.startswith("only_"):
            side = status[5:]
            self.counts[status] += 1
            if not row.get("changes_values"):
                self.counts["benign_extra"] += 1
            elif len(self.only[side]) < self.options.top:
                self.only[side].append(
                    {
                        k: row.get(k)
                        for k in (
                            "step",
                            "phase",
                            "module",
                            "op",
                            "call_index",
                            "source_line",
                            "reason",
                        )
                    }
                )
            if row.get("changes_values") and self.candidate is None and self.first is None:
                self.candidate = (row.get("step"), row)
            return
        self.counts["matched"] += 1
        kind = row.get("kind")
        if kind in ("param", "input"):
            bucket = self.params if kind == "param" else self.inputs
            bucket["checked"] += 1
            if status == "fail" and len(bucket["failed"]) < self.options.top:
                bucket["failed"].append(_brief(row))
        module = row.get("module") or ""
        aggregate = self.modules.get(module)
        if aggregate is None:
            aggregate = self.modules[module] = {
                "module": module,
                "order": len(self.modules),
                "records": 0,
                "failed": 0,
                "max_score": 0.0,
                "max_rel_l2": 0.0,
            }
        aggregate["records"] += 1
        score = row.get("score", 0.0)
        if math.isfinite(score):
            aggregate["max_score"] = max(aggregate["max_score"], score)
        else:
            aggregate["max_score"] = math.inf
        rel = (row.get("metrics") or {}).get("rel_l2")
        if isinstance(rel, float) and math.isfinite(rel):
            aggregate["max_rel_l2"] = max(aggregate["max_rel_l2"], rel)
        if row.get("op_bug"):
            self.counts["op_bugs"] += 1
        if status == "drift":
            self.counts["drift"] += 1
            if self.first_drift is None:
                self.first_drift = _brief(row)
        if status == "fail":
            self.counts["failed"] += 1
            aggregate["failed"] += 1
            entry = (score if math.isfinite(score) else 1e308, -row["row"], _brief(row))
            if len(self.worst) < self.options.top:
                heapq.heappush(self.worst, entry)
            else:
                heapq.heappushpop(self.worst, entry)
            if self.first is None:
                self._first_divergence(row, ref, test)

    def _first_divergence(
        self, row: dict[str, Any], ref: Mapping[str, Any] | None, test: Mapping[str, Any] | None
    ) -> None:
        kind = row.get("kind")
        if row.get("op_bug"):
            first = _brief(row)
            first["cause"] = "op-local replay: the op computes wrongly on TEST"
            first["replay"] = row["op_bug"]
            self.first = first
            return
        if row.get("random_stream") and row.get("inputs_ok"):
            first = _brief(row)
            first["cause"] = "random stream differs"
            self.first = first
            return
        if kind in ("param", "input", "grad") or row.get("inputs_ok"):
            first = _brief(row)
            first["cause"] = {
                "param": "parameter differs",
                "input": "model input differs",
                "grad": "gradient differs while no op before it was flagged",
            }.get(kind, "output differs while every input agrees")
            self.first = first
            if kind == "op" and ref is not None and test is not None:
                self.first_pair = (dict(ref), dict(test))
            return
        if self.candidate is not None:
            _, extra = self.candidate
            first = _brief(extra)
            first["cause"] = (
                f"op ran on {'TEST' if extra['status'] == 'only_test' else 'REF'} only and changed values ({extra['reason']})"
            )
            first["first_failing_record"] = _brief(row)
            first["replay"] = {"status": "not replayed", "why": "the op ran on one side only"}
            self.first = first
            return
        first = _brief(row)
        first["cause"] = (
            "inputs already differ and no recorded op explains it (an op outside the capture, or a filter)"
        )
        first["replay"] = {"status": "not replayed", "why": "its inputs already differ"}
        self.first = first

    def _result(self, seconds: float) -> CompareResult:
        reasons = []
        truncated = {
            "ref": self.ref_info.truncated,
            "test": self.test_info.truncated,
            "ref_detail": self.ref_info.truncated_reason,
            "test_detail": self.test_info.truncated_reason,
        }
        for side, info in (("REF", self.ref_info), ("TEST", self.test_info)):
            if info.truncated:
                reasons.append(f"{side} dump {info.path} is truncated: {info.truncated_reason}")
        if self.counts["failed"]:
            reasons.append(
                f"{self.counts['failed']} of {self.counts['matched']} aligned records differ beyond tolerance"
            )
        if self.counts["matched"] == 0:
            reasons.append(
                "no record of one dump matches the other (different models, or a --map is needed)"
            )
        if self.counts["drift"] and self.options.fail_on_drift:
            reasons.append(
                f"{self.counts['drift']} records beyond tolerance, explained by replay as accumulated drift (--fail-on-drift)"
            )
        truncated_any = truncated["ref"] or truncated["test"]
        if self.counts["op_bugs"]:
            reasons.append(
                f"op-local replay: {self.counts['op_bugs']} ops compute wrongly on TEST (more than k x REF's error against float64)"
            )
        if self.first is not None and "replay" in self.first:
            pass
        elif (
            self.first is not None
            and self.first_pair is not None
            and self.options.replay != "none"
            and _has_tensors(self.first_pair[0])
        ):
            ref, test = self.first_pair
            from accelport.verify.numerics.replay import replay

            self.first["replay"] = replay(
                ref, test, self.ref_files, self.test_files, self.replay_ratio
            )
        elif self.first is not None:
            self.first["replay"] = (
                {"status": "not replayable", "why": "not an op record"}
                if self.first.get("kind") != "op"
                else {
                    "status": "not replayable",
                    "why": "needs full tensors of inputs and outputs (dump with --tensors)",
                }
            )
        passed = not reasons or (
            self.options.allow_truncated
            and truncated_any
            and all("truncated" in r for r in reasons)
        )
        worst = [entry for _, _, entry in sorted(self.worst, reverse=True)]
        modules = sorted(self.modules.values(), key=lambda m: m["order"])
        for m in modules:
            m.pop("order", None)
            m["max_score"] = dumpfile.clean_float(m["max_score"])
        self.ref_files.close()
        self.test_files.close()
        if self.pool is not None:
            self.pool.shutdown()
        return CompareResult(
            ref=self.ref_path,
            test=self.test_path,
            passed=passed,
            reasons=reasons,
            truncated=truncated,
            counts=self.counts,
            first_divergence=self.first,
            params=self.params,
            inputs=self.inputs,
            worst=worst,
            modules=modules,
            only=self.only,
            modes={
                "ref": self.ref_info.header.get("mode", "?"),
                "test": self.test_info.header.get("mode", "?"),
            },
            environment={
                "ref": _env_summary(self.ref_info.header),
                "test": _env_summary(self.test_info.header),
            },
            options={
                "tolerances": {d: list(v) for d, v in self.options.tolerances.items()},
                "criterion": self.options.criterion,
                "replay": self.options.replay,
                "replay_ratio": self.replay_ratio,
                "mapping": str(self.options.mapping) if self.options.mapping else None,
                "autocast": {side: sorted(v) for side, v in self.amp_by_side.items()},
                "allow_truncated": self.options.allow_truncated,
                "fail_on_drift": self.options.fail_on_drift,
            },
            drift={
                "count": self.counts["drift"],
                "fails": self.options.fail_on_drift,
                "first": self.first_drift,
            },
            seconds=seconds,
            bytes_read=self.ref_files.bytes_read + self.test_files.bytes_read,
            _spool=self.spool,
        )


_SAME_VALUES_OPS = frozenset(
    {"aten.view.default", "aten._unsafe_view.default", "aten.reshape.default", "aten.t.default", "aten.transpose.int",
     "aten.permute.default", "aten.unsqueeze.default", "aten.squeeze.dim", "aten.detach.default", "aten.alias.default",
     "aten.clone.default", "aten._to_copy.default", "aten.expand.default", "aten.contiguous.default"}
)  # fmt: skip


def _random_difference(ref: Mapping[str, Any], test: Mapping[str, Any]) -> str | None:
    """Why a random op's draws differ between the runs (dump records `random` for them), or None."""
    r, t = ref.get("random"), test.get("random")
    if not r or not t or r.get("out_crc32") == t.get("out_crc32"):
        return None
    if None in r.get("out_crc32", []) or None in t.get("out_crc32", []):
        return None  # bits not taken (a dtype or layout without a byte view): statistics decide
    if r.get("rng_crc32") is not None and t.get("rng_crc32") is not None and r["rng_crc32"] != t["rng_crc32"]:
        return "random stream differs: the generator's state before the op differs (another seed, generator or device)"
    return "random stream differs: same generator state, other bits drawn (the op samples differently)"


def _data_key(entry: Mapping[str, Any]) -> tuple:
    """Which produced tensor an entry shows: the record that made it (src), which views of
    it share; a tensor with no producing record is known by where its data was saved."""
    if entry.get("src") is not None:
        return ("src", entry["src"])
    return (entry.get("file"), entry.get("start"))


def _has_tensors(record: Mapping[str, Any]) -> bool:
    return all(
        "file" in t
        for t in record.get("in", []) + record.get("out", [])
        if t.get("stats") is not None
    )


def _brief(row: Mapping[str, Any]) -> dict[str, Any]:
    keys = ("kind", "step", "phase", "module", "op", "call_index", "source_line", "status", "score", "reason", "source",
            "inputs_ok", "dtype_ref", "dtype_test", "shape", "seq_ref", "seq_test", "args_ref", "args_test", "metrics", "row")  # fmt: skip
    brief = {k: row[k] for k in keys if k in row}
    if "score" in brief:
        brief["score"] = dumpfile.clean_float(float(brief["score"]))
    if isinstance(brief.get("metrics"), dict):
        brief["metrics"] = {
            k: dumpfile.clean_float(v) if isinstance(v, float) else v
            for k, v in brief["metrics"].items()
        }
    return brief


def _env_summary(header: Mapping[str, Any]) -> dict[str, Any]:
    machine = header.get("machine", {})
    torch_facts = machine.get("torch", {}) if isinstance(machine, dict) else {}
    return {
        "created": header.get("created"),
        "mode": header.get("mode"),
        "torch": torch_facts.get("version"),
        "accelerator": torch_facts.get("accelerator") or "cpu",
        "adapters": machine.get("adapters", {}) if isinstance(machine, dict) else {},
        "determinism": header.get("determinism", {}),
        "seed": header.get("seeds", {}).get("torch_initial_seed"),
        "argv": header.get("argv", []),
    }


def compare_dumps(ref: Path, test: Path, **options: Any) -> CompareResult:
    """Compare dump TEST against dump REF (see the module docstring); options as in `CompareOptions`."""
    known = set(CompareOptions.__dataclass_fields__)
    unknown = set(options) - known
    if unknown:
        raise TypeError(f"compare_dumps: unknown option(s) {sorted(unknown)}")
    if options.get("criterion", "norm") not in metrics.CRITERIA:
        raise ValueError(f"criterion must be one of {metrics.CRITERIA}")
    if options.get("replay", "failing") not in ("failing", "all", "none"):
        raise ValueError("replay must be 'failing', 'all' or 'none'")
    _check_numbers(options)
    return _Comparer(Path(ref), Path(test), CompareOptions(**options)).run()


def _check_numbers(options: Mapping[str, Any]) -> None:
    """Numeric options a user gives (on the command line or in code): one clear error for a bad one."""
    from accelport.errors import InvalidValue

    ratio = options.get("replay_ratio")
    if ratio is not None and not (isinstance(ratio, int | float) and math.isfinite(ratio) and ratio > 0):
        raise InvalidValue("replay_ratio", ratio, "K must be a number above 0 (default 2)")
    for name, least in (("window", 1), ("top", 0)):
        value = options.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
            raise InvalidValue(name, value, f"give a whole number of at least {least}")
    for dtype, pair in (options.get("tolerances") or {}).items():
        rtol, atol = pair
        if not (math.isfinite(rtol) and math.isfinite(atol)) or rtol < 0 or atol < 0 or rtol + atol == 0:
            raise InvalidValue("tolerances", f"{dtype}={rtol},{atol}", "RTOL and ATOL must be finite, not negative, and not both 0")
