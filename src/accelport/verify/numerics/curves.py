"""Compare training curves (loss, grad norm) of a reference run and migrated runs, step by step.

Curves come from CSV (a `step` column and one column per metric, as train.py writes),
JSONL (one object per line with `step` and metrics) or TensorBoard event files (a file
or a folder; tags are the metric names). They are aligned on the steps all runs share,
optionally smoothed with an exponential moving average, and judged per metric:

- without reference seeds: the relative gap |test - ref| / |ref| at the final step and
  on average must stay within the tolerance (1% by default, the per-step rule of
  Megatron-LM's functional tests);
- with reference seeds (the same reference run repeated with other seeds): at each step
  the test may lie anywhere inside the seeds' band [min, max] widened by the tolerance;
  the final step must, and at most `max_outside` of the steps may not.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accelport.errors import InvalidValue, ParameterHint, UserError
from accelport.fileio import read_input
from accelport.verify.numerics import tfevents

STEP_NAMES = ("step", "iteration", "iter", "global_step")
DEFAULT_JUDGED = ("loss",)


@dataclass
class Run:
    """One run's metrics: name -> {step: value}."""

    path: Path
    series: dict[str, dict[int, float]]
    duplicates: int = 0  # rows whose step appeared before (appended logs): the last one is kept


def _store(series: dict[str, dict[int, float]], name: str, step: int, value: float) -> bool:
    bucket = series.setdefault(name, {})
    seen = step in bucket
    bucket[step] = value
    return seen


def _number(text: Any) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value


LOG_LIMIT_BYTES = 4 << 30
LOG_HINT = "give a CSV, JSONL or TensorBoard log of a training run"


def read_run(path: str | Path) -> Run:
    """Read a CSV, JSONL or TensorBoard log into a `Run`."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path}: not found; {LOG_HINT}")
    if path.is_dir() or "tfevents" in path.name:
        files = tfevents.event_files(path)
        if not files:
            raise UserError(
                f"{path}: no TensorBoard event files (events.out.tfevents.*) in this folder"
            )
        series: dict[str, dict[int, float]] = {}
        duplicates = 0
        for file in files:
            for tag, step, value in tfevents.scalars(file):
                duplicates += _store(series, tag, step, value)
        return Run(path, series, duplicates)
    # Logs of long runs are large, but not this large: a sparse or runaway file is refused unread.
    text = read_input(path, "training log", limit=LOG_LIMIT_BYTES, hint=LOG_HINT).decode("utf-8", errors="replace")
    first = text.lstrip()[:1]
    if first == "{":
        return _read_jsonl(path, text)
    return _read_csv(path, text)


def _read_jsonl(path: Path, text: str) -> Run:
    series: dict[str, dict[int, float]] = {}
    duplicates = 0
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            row = None
        if not isinstance(row, dict):
            raise UserError(
                f"{path}:{number}: not a JSON object; each line must be one JSON object with a step"
            )
        step_key = next((k for k in STEP_NAMES if k in row), None)
        if step_key is None:
            raise UserError(f"{path}:{number}: no step field ({', '.join(STEP_NAMES)})")
        step = _number(row[step_key]) if not isinstance(row[step_key], bool) else None
        if step is None or not math.isfinite(step) or step != int(step):
            raise UserError(
                f"{path}:{number}: {step_key} {json.dumps(row[step_key])} is not a whole number; "
                "each line needs an integer step"
            )
        step = int(step)
        repeated = False
        for key, value in row.items():
            number_value = (
                _number(value) if key != step_key and not isinstance(value, bool) else None
            )
            if number_value is not None:
                repeated |= _store(series, key, step, number_value)
        duplicates += repeated
    return Run(path, series, duplicates)


def _read_csv(path: Path, text: str) -> Run:
    reader = csv.reader(text.splitlines())
    header = next(reader, None)
    if not header:
        raise UserError(f"{path}: empty log; expected a CSV header such as step,loss,grad_norm")
    names = [h.strip() for h in header]
    step_col = next((i for i, h in enumerate(names) if h.lower() in STEP_NAMES), None)
    if step_col is None:
        raise UserError(
            f"{path}: CSV header {','.join(names)} has no step column ({', '.join(STEP_NAMES)})"
        )
    series: dict[str, dict[int, float]] = {}
    duplicates = 0
    for row in reader:
        if not row or row == header:
            continue  # appended runs repeat the header
        step = _number(row[step_col]) if step_col < len(row) else None
        if step is None:
            continue
        repeated = False
        for index, cell in enumerate(row):
            if index == step_col or index >= len(names):
                continue
            value = _number(cell)
            if value is not None:
                repeated |= _store(series, names[index], int(step), value)
        duplicates += repeated
    return Run(path, series, duplicates)


def _ema(values: Sequence[float], alpha: float) -> list[float]:
    if alpha <= 0:
        return list(values)
    out, last = [], None
    for value in values:
        last = value if last is None else alpha * last + (1 - alpha) * value
        out.append(last)
    return out


def _metric_key(run: Run, name: str) -> str | None:
    """The run's series for metric `name`: exact, or a tag ending in /name (train/loss)."""
    if name in run.series:
        return name
    matches = [k for k in run.series if k.split("/")[-1] == name]
    return matches[0] if len(matches) == 1 else None


@dataclass
class MetricResult:
    metric: str
    judged: bool
    passed: bool
    tolerance: float
    steps: list[int]
    ref: list[float]
    tests: dict[str, list[float]]
    gaps: dict[str, list[float]]  # per test: relative gap per step
    final_gap: dict[str, float]
    mean_gap: dict[str, float]
    max_gap: dict[str, float]
    band: tuple[list[float], list[float]] | None = None
    outside: dict[str, float] = field(
        default_factory=dict
    )  # fraction of steps outside band/tolerance
    reasons: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "judged": self.judged,
            "verdict": "pass" if self.passed else "fail",
            "tolerance": self.tolerance,
            "steps": len(self.steps),
            "first_step": self.steps[0] if self.steps else None,
            "last_step": self.steps[-1] if self.steps else None,
            "final_gap": self.final_gap,
            "mean_gap": self.mean_gap,
            "max_gap": self.max_gap,
            "outside_band": self.outside if self.band else None,
            "reasons": self.reasons,
            "per_step": {
                "step": self.steps,
                "ref": self.ref,
                "test": self.tests,
                "relative_gap": self.gaps,
            },
        }


@dataclass
class CurvesResult:
    """The outcome of `compare_curves`."""

    ref: Path
    tests: list[Path]
    seeds: list[Path]
    metrics: list[MetricResult]
    options: dict[str, Any]

    @property
    def passed(self) -> bool:
        return all(m.passed for m in self.metrics if m.judged) and any(
            m.judged for m in self.metrics
        )

    @property
    def verdict(self) -> str:
        return "pass" if self.passed else "fail"

    def _judged(self) -> MetricResult | None:
        return next((m for m in self.metrics if m.judged), None)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON (a non-finite value as the string 'nan' or 'inf')."""
        from accelport.verify.numerics.dumpfile import json_safe

        judged = self._judged()
        return json_safe(
            {
                "verdict": self.verdict,
                "ref": str(self.ref),
                "tests": [str(t) for t in self.tests],
                "seeds": [str(s) for s in self.seeds],
                # Headline gaps: the first judged metric (the loss), worst over the test runs.
                "final_gap": max(judged.final_gap.values(), default=None) if judged else None,
                "mean_gap": max(judged.mean_gap.values(), default=None) if judged else None,
                "metrics": [m.to_dict() for m in self.metrics],
                "options": self.options,
            }
        )

    def svg(self, metric: str | None = None) -> str:
        """An SVG chart overlaying the curves of one metric (the first judged one by default)."""
        from accelport.report.svg import line_chart

        result = (
            next((m for m in self.metrics if m.metric == metric), None)
            if metric
            else self._judged() or (self.metrics[0] if self.metrics else None)
        )
        if result is None:
            return line_chart({}, title="no data")
        series = {
            f"REF {self.ref.name}": list(zip(map(float, result.steps), result.ref, strict=True))
        }
        for name, values in result.tests.items():
            series[f"TEST {name}"] = list(zip(map(float, result.steps), values, strict=True))
        if result.band is not None:
            series["seed band low"] = list(
                zip(map(float, result.steps), result.band[0], strict=True)
            )
            series["seed band high"] = list(
                zip(map(float, result.steps), result.band[1], strict=True)
            )
        return line_chart(series, title=result.metric, x_label="step", y_label=result.metric)

    def png(self, path: str | Path) -> None:
        """Write the curves of every metric as one PNG (needs matplotlib, in the torch extra)."""
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            from accelport.errors import MissingDependency

            raise MissingDependency("matplotlib", "plots", "a PNG plot of the curves") from None
        from accelport.fileio import atomic_open

        shown = self.metrics or []
        fig, axes = plt.subplots(
            len(shown) or 1, 1, figsize=(8, 3.2 * max(1, len(shown))), squeeze=False
        )
        for axis, result in zip(axes[:, 0], shown, strict=False):
            axis.plot(result.steps, result.ref, label=f"REF {self.ref.name}", linewidth=1.6)
            for name, values in result.tests.items():
                axis.plot(result.steps, values, label=f"TEST {name}", linewidth=1.2)
            if result.band is not None:
                axis.fill_between(
                    result.steps, result.band[0], result.band[1], alpha=0.2, label="reference seeds"
                )
            state = (
                ("pass" if result.passed else "fail")
                if result.judged
                else ("within" if not result.reasons else "outside") + " tolerance (not judged)"
            )
            axis.set_title(f"{result.metric}: {state}")
            axis.set_xlabel("step")
            axis.legend(fontsize=8)
        fig.tight_layout()
        try:
            if Path(path).is_dir():
                raise IsADirectoryError(21, "is a directory")
            with atomic_open(path, "wb", encoding=None) as handle:
                fig.savefig(handle, format="png", dpi=100)
        except OSError as exc:
            why = "a part of the path is a file, not a folder" if isinstance(exc, FileExistsError | NotADirectoryError) else exc.strerror or str(exc)
            raise ParameterHint(f"{path}: cannot write the PNG ({why}); choose another path for it", "png") from None
        finally:
            plt.close(fig)


def _relative(test: float, ref: float, floor: float) -> float:
    return abs(test - ref) / max(abs(ref), floor)


def compare_curves(
    ref: Path,
    tests: list[Path],
    *,
    seeds: Sequence[Path] = (),
    metrics: Sequence[str] | None = None,
    judge: Sequence[str] | None = None,
    tolerance: float | None = None,
    tolerances: Mapping[str, float] | None = None,
    smooth: float = 0.0,
    max_outside: float = 0.05,
    per_step: bool = False,
) -> CurvesResult:
    """Compare the curves of `tests` with `ref` (and the band of `seeds`, other seeds of the reference)."""
    from accelport.verify.numerics.metrics import defaults

    if not tests:
        raise UserError("accelport curves: give at least one TEST run after REF")
    if not 0 <= smooth < 1:
        raise InvalidValue("smooth", smooth, "the EMA weight must be in [0, 1)")
    if not 0 <= max_outside <= 1:
        raise InvalidValue("max_outside", max_outside, "give the share of steps as a fraction in [0, 1]")
    for name, value in [("", tolerance), *(tolerances or {}).items()]:
        if value is not None and not (math.isfinite(value) and value > 0):
            parameter, shown = ("tolerances", f"{name}={value}") if name else ("tolerance", value)
            raise InvalidValue(parameter, shown, "the allowed relative gap must be a fraction above 0 (0.01 is 1%)")
    base_tol = tolerance if tolerance is not None else float(defaults()["curves"]["relative_gap"])
    ref_run = read_run(ref)
    test_runs = [read_run(t) for t in tests]
    seed_runs = [read_run(s) for s in seeds]
    if metrics is None:
        everyone = [ref_run, *test_runs, *seed_runs]
        metrics = [m for m in ("loss", "grad_norm") if all(_metric_key(r, m) for r in everyone)]
        metrics = metrics or sorted(set.intersection(*(set(r.series) for r in everyone)))
    if not metrics:
        raise UserError(
            f"{ref}: no metrics found; expected columns or tags such as loss and grad_norm"
        )
    judged = (
        set(judge)
        if judge is not None
        else {m for m in metrics if m.split("/")[-1] in DEFAULT_JUDGED} or {metrics[0]}
    )
    names = _names([Path(t) for t in tests])
    results = []
    for metric in metrics:
        key_ref = _metric_key(ref_run, metric)
        if key_ref is None:
            raise UserError(
                f"{ref}: has no metric {metric!r}; it has {', '.join(sorted(ref_run.series)) or 'none'}"
            )
        keys = []
        for run in test_runs + seed_runs:
            key = _metric_key(run, metric)
            if key is None:
                raise UserError(
                    f"{run.path}: has no metric {metric!r}; it has {', '.join(sorted(run.series)) or 'none'}"
                )
            keys.append(key)
        steps_sets = [set(ref_run.series[key_ref])] + [
            set(run.series[k]) for run, k in zip(test_runs + seed_runs, keys, strict=True)
        ]
        steps = sorted(set.intersection(*steps_sets))
        if not steps:
            raise UserError(
                f"{tests[0]}: shares no step with {ref} for {metric!r}; are they logs of the same training?"
            )
        tol = (tolerances or {}).get(metric, base_tol)
        ref_last = max(ref_run.series[key_ref])
        # A run that stops before REF does (a crash, a truncated log) cannot show it follows REF to the end.
        short = [
            (run, max(run.series[k]))
            for run, k in zip(test_runs + seed_runs, keys, strict=True)
            if max(run.series[k]) < ref_last
        ]
        ref_raw = [ref_run.series[key_ref][s] for s in steps]
        ref_values = _ema(ref_raw, smooth)
        floor = max(1e-12, 1e-6 * max((abs(v) for v in ref_values), default=0.0))
        band = None
        if seed_runs:
            seed_values = [ref_values] + [
                _ema([run.series[k][s] for s in steps], smooth)
                for run, k in zip(seed_runs, keys[len(test_runs) :], strict=True)
            ]
            band = (
                [min(col) for col in zip(*seed_values, strict=True)],
                [max(col) for col in zip(*seed_values, strict=True)],
            )
        result = MetricResult(
            metric, metric in judged, True, tol, steps, ref_values, {}, {}, {}, {}, {}, band
        )
        bad_ref = next((s for s, v in zip(steps, ref_raw, strict=True) if not math.isfinite(v)), None)
        if bad_ref is not None:
            result.reasons.append(
                f"REF {Path(ref).name}: {metric} is {ref_raw[steps.index(bad_ref)]} at step {bad_ref}; "
                "a reference that diverged cannot judge other runs"
            )
        for run, last in short:
            role = "seed" if run in seed_runs else "TEST"
            result.reasons.append(
                f"{role} {run.path.name}: {metric} ends at step {last}, REF's at step {ref_last} "
                "(truncated run or log?)"
            )
        for name, run, key in zip(names, test_runs, keys, strict=False):
            values = _ema([run.series[key][s] for s in steps], smooth)
            gaps = [_relative(t, r, floor) for t, r in zip(values, ref_values, strict=True)]
            result.tests[name] = values
            result.gaps[name] = gaps
            result.final_gap[name] = gaps[-1]
            result.mean_gap[name] = sum(gaps) / len(gaps)
            result.max_gap[name] = max(gaps)
            if band is not None:
                inside = [
                    lo - tol * max(abs(lo), floor) <= v <= hi + tol * max(abs(hi), floor)
                    for v, lo, hi in zip(values, band[0], band[1], strict=True)
                ]
                result.outside[name] = 1 - sum(inside) / len(inside)
                if not inside[-1]:
                    result.reasons.append(
                        f"{name}: final {metric} {values[-1]:.5g} outside the reference seeds' band"
                    )
                if result.outside[name] > max_outside:
                    result.reasons.append(
                        f"{name}: {result.outside[name]:.0%} of steps outside the band (allowed {max_outside:.0%})"
                    )
            else:
                if gaps[-1] > tol:
                    result.reasons.append(f"{name}: final {metric} gap {gaps[-1]:.2%} > {tol:.2%}")
                if result.mean_gap[name] > tol:
                    result.reasons.append(
                        f"{name}: mean {metric} gap {result.mean_gap[name]:.2%} > {tol:.2%}"
                    )
                if per_step and result.max_gap[name] > tol:
                    bad = steps[gaps.index(result.max_gap[name])]
                    result.reasons.append(
                        f"{name}: {metric} gap {result.max_gap[name]:.2%} at step {bad} > {tol:.2%}"
                    )
            for value in values:
                if not math.isfinite(value):
                    result.reasons.append(f"{name}: non-finite {metric}")
                    break
        result.passed = not result.reasons
        results.append(result)
    notes = {str(r.path): r.duplicates for r in [ref_run, *test_runs, *seed_runs] if r.duplicates}
    return CurvesResult(
        Path(ref),
        [Path(t) for t in tests],
        [Path(s) for s in seeds],
        results,
        {
            "tolerance": base_tol,
            "smooth": smooth,
            "max_outside": max_outside,
            "per_step": per_step,
            "duplicate_steps_kept_last": notes,
        },
    )


def _names(paths: list[Path]) -> list[str]:
    names = [p.name for p in paths]
    if len(set(names)) == len(names):
        return names
    return [str(p) for p in paths]
