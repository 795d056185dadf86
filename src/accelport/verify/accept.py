"""Acceptance: one spec of thresholds in, one verdict out (self-contained HTML with plots, JUnit XML, JSON).

A spec (TOML) names what was measured on both machines and what counts as
acceptable. Paths are relative to the spec file. Every section is optional,
but a spec must have at least one:

    title = "TinyLM: CUDA -> Ascend"

    [correctness]                 # accelport.verify.numerics.compare.compare_dumps
    reference = "dumps/cuda"
    test = "dumps/npu"
    options = { tolerances = { float32 = [1e-3, 1e-3] } }   # compare_dumps options (below)

    [precision]                   # accelport.verify.numerics.curves.compare_curves
    reference = "curves/cuda.csv"
    tests = ["curves/npu.csv"]
    options = { tolerance = 0.01 }  # compare_curves options (below)

    [[performance]]               # accelport bench --save results
    name = "train step"
    result = "bench/npu.json"
    baseline = "bench/cuda.json"
    floor = 0.6                   # pass at >= 60% of baseline throughput
    allow_mismatch = false        # optional: compare results of different scenarios anyway
    base_trace = "traces/cuda.json"   # optional: explain the ratio per op
    test_trace = "traces/npu.json"

    [[stability]]                 # accelport soak --save results
    name = "72h soak"
    result = "soak/npu.json"

    [[collectives]]               # accelport comm --save results
    name = "8 ranks"
    result = "comm/npu.json"
    min_busbw_gbps = 100.0        # optional

`options` are checked when the spec loads: unknown names and wrong types are
errors naming the spec and the option. [correctness] options: mapping (path),
tolerances (table DTYPE = [RTOL, ATOL], DTYPE one of float64, float32,
float16, bfloat16, "*"), criterion (norm, max, elementwise), replay
(failing, all, none), replay_ratio (number), allow_truncated (true/false),
window, top, threads (positive integers). [precision] options: seeds
(paths), metrics and judge (lists of names), tolerance (number), tolerances
(table METRIC = number), smooth (0 <= x < 1), max_outside (0..1), per_step
(true/false).

A check that cannot run (a missing library, a file that does not load) is an
error, never a pass: the verdict fails and the report says why.
"""

from __future__ import annotations

import importlib
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from accelport import __version__
from accelport.errors import UserError
from accelport.fileio import read_input_text

RESULT_KIND = "accelport.accept"
SECTIONS = ("correctness", "precision", "performance", "stability", "collectives")
TITLES = {
    "correctness": "Correctness (numerics)",
    "precision": "Precision (training curves)",
    "performance": "Performance",
    "stability": "Stability (soak)",
    "collectives": "Collectives",
}

# key -> (type, required); "path" is a file or folder relative to the spec.
_SCHEMA: dict[str, dict[str, tuple[str, bool]]] = {
    "correctness": {"name": ("str", False), "reference": ("path", True), "test": ("path", True), "options": ("table", False)},
    "precision": {"name": ("str", False), "reference": ("path", True), "tests": ("paths", True), "options": ("table", False)},
    "performance": {
        "name": ("str", False),
        "result": ("path", True),
        "baseline": ("path", True),
        "floor": ("number", False),
        "base_trace": ("path", False),
        "test_trace": ("path", False),
        "top": ("int", False),
        "allow_mismatch": ("bool", False),
    },
    "stability": {"name": ("str", False), "result": ("path", True)},
    "collectives": {"name": ("str", False), "result": ("path", True), "min_busbw_gbps": ("number", False)},
}
_MULTI = ("performance", "stability", "collectives")

_TOLERANCE_DTYPES = ("float64", "float32", "float16", "bfloat16", "*")
# What [correctness] and [precision] `options` may hold: option -> (kind, detail).
# Kept in step with CompareOptions (compare.py) and compare_curves (curves.py).
_OPTIONS: dict[str, dict[str, tuple[str, Any]]] = {
    "correctness": {
        "mapping": ("path", None),
        "tolerances": ("dtype-tolerances", None),
        "criterion": ("choice", ("norm", "max", "elementwise")),
        "replay": ("choice", ("failing", "all", "none")),
        "replay_ratio": ("number", None),
        "allow_truncated": ("bool", None),
        "window": ("int", None),
        "top": ("int", None),
        "threads": ("int", None),
    },
    "precision": {
        "seeds": ("paths", None),
        "metrics": ("names", None),
        "judge": ("names", None),
        "tolerance": ("number", None),
        "tolerances": ("metric-tolerances", None),
        "smooth": ("fraction", (0.0, 1.0, False)),
        "max_outside": ("fraction", (0.0, 1.0, True)),
        "per_step": ("bool", None),
    },
}


@dataclass(frozen=True)
class Spec:
    path: Path
    title: str
    sections: dict[str, list[dict[str, Any]]]  # section -> entries with paths resolved


def load_spec(path: str | Path) -> Spec:
    """Read and validate a spec; every problem is a UserError naming the file and the key."""
    path = Path(path)
    text = read_input_text(path, "spec", hint="write one (see docs/accept.md)")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path}: not valid TOML ({exc}); fix the spec") from None
    unknown = sorted(set(data) - {"title", *SECTIONS})
    if unknown:
        raise UserError(f"{path}: unknown key(s) {', '.join(unknown)}; allowed: title, {', '.join(SECTIONS)}")
    title = data.get("title", "accelport acceptance report")
    if not isinstance(title, str):
        raise UserError(f"{path}: title must be a string")
    sections: dict[str, list[dict[str, Any]]] = {}
    for section in SECTIONS:
        if section not in data:
            continue
        raw = data[section]
        entries = raw if isinstance(raw, list) else [raw]
        if section not in _MULTI and isinstance(raw, list):
            raise UserError(f"{path}: [{section}] is a single table; write [{section}], not [[{section}]]")
        if not entries or not all(isinstance(e, dict) for e in entries):
            raise UserError(f"{path}: [{section}] must be a table" + (f" or [[{section}]] tables" if section in _MULTI else ""))
        sections[section] = [_validate_entry(path, section, i, entry) for i, entry in enumerate(entries)]
    if not sections:
        raise UserError(f"{path}: the spec has no section; add at least one of {', '.join(SECTIONS)}")
    return Spec(path=path, title=title, sections=sections)


def _validate_entry(spec: Path, section: str, index: int, entry: dict[str, Any]) -> dict[str, Any]:
    schema = _SCHEMA[section]
    where = f"{spec}: [{section}]" + (f" #{index + 1}" if section in _MULTI else "")
    unknown = sorted(set(entry) - set(schema))
    if unknown:
        raise UserError(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(schema)}")
    out: dict[str, Any] = {"name": entry.get("name") or (section if section not in _MULTI else f"{section} {index + 1}")}
    for key, (kind, required) in schema.items():
        if key not in entry:
            if required:
                raise UserError(f"{where}: missing {key}")
            continue
        value = entry[key]
        if kind == "str" and not isinstance(value, str):
            raise UserError(f"{where}: {key} must be a string")
        if kind == "number" and (isinstance(value, bool) or not isinstance(value, int | float) or value <= 0):
            raise UserError(f"{where}: {key} must be a positive number (got {value!r})")
        if kind == "int" and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
            raise UserError(f"{where}: {key} must be a positive integer (got {value!r})")
        if kind == "bool" and not isinstance(value, bool):
            raise UserError(f"{where}: {key} must be true or false (got {value!r})")
        if kind == "table" and not isinstance(value, dict):
            raise UserError(f"{where}: {key} must be a table, e.g. {key} = {_OPTION_EXAMPLE[section]}")
        if kind == "table" and key == "options":
            value = _validate_options(spec, where, section, value)
        if kind in ("path", "paths"):
            values = value if kind == "paths" else [value]
            if kind == "paths" and (not isinstance(value, list) or not value):
                raise UserError(f"{where}: {key} must be a non-empty list of paths")
            resolved = []
            for item in values:
                if not isinstance(item, str) or not item:
                    raise UserError(f"{where}: {key} must be a path string")
                target = (spec.parent / item).resolve()
                if not target.exists():
                    raise UserError(f"{where}: {key} = {item!r} does not exist (paths are relative to the spec)")
                resolved.append(target)
            value = resolved if kind == "paths" else resolved[0]
        out[key] = value
    return out


_OPTION_EXAMPLE = {"correctness": "{ tolerances = { float32 = [1e-3, 1e-3] } }", "precision": "{ tolerance = 0.01 }"}


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _validate_options(spec: Path, where: str, section: str, options: dict[str, Any]) -> dict[str, Any]:
    """Check `options` before they reach compare_dumps/compare_curves; returns them with paths resolved."""
    schema = _OPTIONS[section]
    unknown = sorted(set(options) - set(schema))
    if unknown:
        raise UserError(f"{where}: unknown option(s) {', '.join(unknown)} in options; allowed: {', '.join(schema)}")
    out: dict[str, Any] = {}
    for key, value in options.items():
        kind, detail = schema[key]
        name = f"options.{key}"
        if kind == "bool" and not isinstance(value, bool):
            raise UserError(f"{where}: {name} must be true or false (got {value!r})")
        if kind == "int" and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
            raise UserError(f"{where}: {name} must be a positive integer (got {value!r})")
        if kind == "number" and not (_is_number(value) and value > 0):
            raise UserError(f"{where}: {name} must be a positive number (got {value!r})")
        if kind == "fraction":
            low, high, closed = detail
            if not (_is_number(value) and low <= value and (value <= high if closed else value < high)):
                bound = f"{low:g} <= x {'<=' if closed else '<'} {high:g}"
                raise UserError(f"{where}: {name} must be a number with {bound} (got {value!r})")
        if kind == "choice" and value not in detail:
            raise UserError(f"{where}: {name} must be one of {', '.join(detail)} (got {value!r})")
        if kind == "names" and (not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value)):
            raise UserError(f"{where}: {name} must be a non-empty list of names, e.g. {key} = [\"loss\"] (got {value!r})")
        if kind == "metric-tolerances" and (not isinstance(value, dict) or not all(_is_number(v) and v > 0 for v in value.values())):
            raise UserError(f"{where}: {name} must be a table of positive numbers, e.g. {key} = {{ loss = 0.02 }} (got {value!r})")
        if kind == "dtype-tolerances":
            value = _dtype_tolerances(where, name, value)
        if kind in ("path", "paths"):
            items = value if kind == "paths" else [value]
            if kind == "paths" and (not isinstance(value, list) or not value):
                raise UserError(f"{where}: {name} must be a non-empty list of paths (got {value!r})")
            resolved = []
            for item in items:
                if not isinstance(item, str) or not item:
                    raise UserError(f"{where}: {name} must be a path string (got {item!r})")
                target = (spec.parent / item).resolve()
                if not target.exists():
                    raise UserError(f"{where}: {name} = {item!r} does not exist (paths are relative to the spec)")
                resolved.append(target)
            value = resolved if kind == "paths" else resolved[0]
        out[key] = value
    return out


def _dtype_tolerances(where: str, name: str, value: Any) -> dict[str, tuple[float, float]]:
    how = f"write {name.split('.')[-1]} = {{ float32 = [RTOL, ATOL] }} with dtypes from {', '.join(_TOLERANCE_DTYPES)}"
    if not isinstance(value, dict):
        raise UserError(f"{where}: {name} must be a table; {how}")
    out = {}
    for dtype, pair in value.items():
        if dtype not in _TOLERANCE_DTYPES:
            raise UserError(f"{where}: {name} has unknown dtype {dtype!r}; {how}")
        if not (isinstance(pair, list) and len(pair) == 2 and all(_is_number(v) and v >= 0 for v in pair)):
            raise UserError(f"{where}: {name}.{dtype} must be [RTOL, ATOL], two numbers >= 0 (got {pair!r}); {how}")
        out[dtype] = (float(pair[0]), float(pair[1]))
    return out


@dataclass
class Check:
    """One line of the verdict; status is pass, fail, error (could not run: counts as a failure) or
    inconclusive (the measurement cannot tell: a threshold inside its confidence interval)."""

    section: str
    name: str
    status: str
    summary: str
    figures: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    html: list[tuple[str, Any]] = field(default_factory=list)  # ("svg"|"table"|"code"|"cards", payload)

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    def to_dict(self) -> dict[str, Any]:
        return {"section": self.section, "name": self.name, "status": self.status, "summary": self.summary,
                "figures": self.figures, "seconds": self.seconds}


@dataclass
class AcceptReport:
    spec: Spec
    checks: list[Check]
    created: str

    @property
    def verdict(self) -> str:
        """pass: every check passed; fail: one failed or could not run; else inconclusive."""
        if self.checks and all(c.passed for c in self.checks):
            return "pass"
        if not self.checks or any(c.status in ("fail", "error") for c in self.checks):
            return "fail"
        return "inconclusive"

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": RESULT_KIND,
            "version": 1,
            "title": self.spec.title,
            "spec": str(self.spec.path),
            "created": self.created,
            "accelport": __version__,
            "verdict": self.verdict,
            "counts": {s: sum(1 for c in self.checks if c.status == s) for s in ("pass", "fail", "error", "inconclusive")},
            "checks": [c.to_dict() for c in self.checks],
        }


# --------------------------------------------------------------------------- evaluating sections


def _numerics(module: str, function: str) -> Callable[..., Any] | str:
    """The numerics library's entry point, or why it is unavailable."""
    try:
        return getattr(importlib.import_module(f"accelport.verify.numerics.{module}"), function)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("accelport"):
            return f"accelport.verify.numerics.{module} is not part of this accelport build, so {function}() cannot run"
        return f"accelport.verify.numerics.{module} needs {exc.name}, which is not installed"
    except AttributeError:
        return f"accelport.verify.numerics.{module} has no {function}(); this accelport build does not match the spec"


def _from_numerics(section: str, entry: dict[str, Any], entry_point: tuple[str, str], arguments: tuple[Any, ...],
                   keys: tuple[str, ...], plots: Callable[[Any], list[tuple[str, str]]] | None = None) -> Check:
    """Run the numerics library's `module.function(*arguments, **options)` and report `keys` of its result.

    `plots(result)` gives (svg, caption) pairs drawn under the figures.
    """
    compare = _numerics(*entry_point)
    if isinstance(compare, str):
        return Check(section, entry["name"], "error", f"{compare}; the {section} check did not run")
    result = compare(*arguments, **entry.get("options", {}))
    data = result.to_dict()
    status = "pass" if result.passed else "fail"
    figures = {key: data.get(key) for key in ("verdict", *keys)}
    summary = f"verdict {data.get('verdict')}; " + "; ".join(f"{k} {_describe(k, data.get(k))}" for k in keys)
    check = Check(section, entry["name"], status, summary, figures)
    check.html.append(("table", (["figure", "value"], [[k, _short(v, 400)] for k, v in figures.items()])))
    for svg, caption in plots(result) if plots else []:
        check.html.append(("svg", (svg, caption)))
    return check


def _describe(key: str, value: Any) -> str:
    """A figure for the one-line summary; a first divergence reads as op, module, step and line."""
    if key == "first_divergence" and isinstance(value, dict):
        where = f"{value.get('op')} in {value.get('module')} (step {value.get('step')}, {value.get('phase')})"
        line = f" at {value['source_line']}" if value.get("source_line") else ""
        reason = f": {value['reason']}" if value.get("reason") else ""
        return f"{where}{line}{reason}"
    return _short(value)


def _short(value: Any, limit: int = 160) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def check_correctness(entry: dict[str, Any]) -> Check:
    arguments = (entry["reference"], entry["test"])
    return _from_numerics("correctness", entry, ("compare", "compare_dumps"), arguments, ("first_divergence",))


def check_precision(entry: dict[str, Any]) -> Check:
    arguments = (entry["reference"], list(entry["tests"]))
    return _from_numerics("precision", entry, ("curves", "compare_curves"), arguments, ("final_gap", "mean_gap"),
                          plots=_curve_plots)


def _curve_plots(result: Any) -> list[tuple[str, str]]:
    """One inline SVG per compared metric: the reference and test curves (and the seeds' band) per step."""
    smoothed = " (EMA-smoothed)" if result.options.get("smooth") else ""
    return [(result.svg(m.metric), f"{m.metric} per step: reference and test runs{smoothed}"
             + ("" if m.judged else "; not judged")) for m in result.metrics]


def check_performance(entry: dict[str, Any]) -> Check:
    from accelport.report.svg import line_chart
    from accelport.verify.perf import bench

    test = bench.load_result(entry["result"])
    baseline = bench.load_result(entry["baseline"])
    comparison = bench.compare(test, baseline, floor=float(entry.get("floor", bench.DEFAULT_FLOOR)),
                               allow_mismatch=bool(entry.get("allow_mismatch", False)))
    status = comparison.verdict
    summary = (
        f"{comparison.ratio:.3f}x of baseline {comparison.basis} (95% CI {comparison.ci_low:.3f}..{comparison.ci_high:.3f}); "
        f"floor {comparison.floor:.2f}"
        + (f"; {comparison.describe()}" if comparison.floor_within_ci else "")
        + (f"; compared although the scenarios differ: {'; '.join(comparison.mismatch)}" if comparison.mismatch else "")
        + "".join(f"; the {side} stopped on {result.stop_reason} before its CI reached the target width"
                  for side, result in (("test", test), ("baseline", baseline)) if result.stop_reason in bench.UNCONVERGED)
    )
    check = Check("performance", entry["name"], status, summary, comparison.to_dict())
    check.figures["stop_reason"] = {"test": test.stop_reason, "baseline": baseline.stop_reason}
    check.html.append(("cards", [
        ("ratio", f"{comparison.ratio:.3f}x"),
        ("floor", f"{comparison.floor:.2f}"),
        ("test median ms", f"{comparison.test_median_s * 1000:.3f}"),
        ("baseline median ms", f"{comparison.baseline_median_s * 1000:.3f}"),
    ]))
    check.html.append(("svg", (line_chart(
        {"baseline": list(enumerate(t * 1000 for t in baseline.times_s)),
         "test": list(enumerate(t * 1000 for t in test.times_s))},
        title="Step time per measured step", x_label="step", y_label="ms"), "Step times of both machines")))
    if entry.get("base_trace") and entry.get("test_trace"):
        from accelport.verify.perf import profile

        diff = profile.diff_traces(entry["base_trace"], entry["test_trace"])
        check.figures["profile_diff"] = {
            "total_delta_us": diff.total_delta,
            "top": [r.to_dict() for r in diff.rows[:5]],
        }
        check.html.append(("profile-diff", (diff, int(entry.get("top", 15)))))
    return check


def check_stability(entry: dict[str, Any]) -> Check:
    from accelport.report.svg import line_chart
    from accelport.verify.stability import soak

    data = soak.load_result(entry["result"])
    failures = data.get("failures") or []
    status = "pass" if data["verdict"] == "pass" and not failures else "fail"
    slopes = data.get("slopes", {})
    summary = "; ".join(failures) if failures else (
        f"{data['steps']} steps, {data['duration_s']:.1f} s: no hang, OOM, NaN or leak"
    )
    figures = {k: data.get(k) for k in ("verdict", "failures", "steps", "duration_s", "stop_reason", "step_time_median_s", "slopes")}
    check = Check("stability", entry["name"], status, summary, figures)
    samples = data.get("samples") or []
    if samples:
        check.html.append(("svg", (line_chart(
            {"step time": [(s["step"], s["dt"] * 1000) for s in samples if s.get("dt") is not None]},
            title="Step time", x_label="step", y_label="ms"), "Step time over the run")))
        memory = {key: [(s["step"], s[key] / 2**20) for s in samples if s.get(key) is not None]
                  for key in ("rss", "heap", "device_allocated", "device_reserved")}
        check.html.append(("svg", (line_chart({k: v for k, v in memory.items() if v}, title="Memory",
                                              x_label="step", y_label="MiB"), "Host RSS and device memory")))
        losses = [(s["step"], s["loss"]) for s in samples if isinstance(s.get("loss"), int | float) and math.isfinite(s["loss"])]
        if losses:
            check.html.append(("svg", (line_chart({"loss": losses}, title="Loss", x_label="step", y_label="loss"), "Loss")))
    rows = [[key, fit.get("per_step"), fit.get("low"), fit.get("high"), fit.get("relative")] for key, fit in slopes.items()]
    if rows:
        check.html.append(("table", (["series", "slope/step", "95% low", "95% high", "change over run"], rows)))
    if data.get("hang") and data["hang"].get("stacks"):
        check.html.append(("code", data["hang"]["stacks"]))
    return check


def check_collectives(entry: dict[str, Any]) -> Check:
    from accelport.report.svg import line_chart
    from accelport.verify.stability import comm

    data = comm.load_result(entry["result"])
    problems = list(data.get("errors") or [])
    if data.get("wrong"):
        problems.append(f"{data['wrong']} wrong element(s)")
    floor = entry.get("min_busbw_gbps")
    if floor is not None and data.get("avg_busbw_gbps", 0.0) < floor:
        problems.append(f"average bus bandwidth {data.get('avg_busbw_gbps', 0.0):.3g} GB/s below {floor} GB/s")
    if not data.get("rows"):
        problems.append("no collective ran")
    status = "pass" if not problems and data.get("verdict") == "pass" else "fail"
    summary = "; ".join(problems) if problems else (
        f"{data['ranks']} ranks on {data['backend']}: every result exact; avg busbw {data['avg_busbw_gbps']:.3g} GB/s"
    )
    check = Check("collectives", entry["name"], status, summary,
                  {k: data.get(k) for k in ("verdict", "ranks", "backend", "device", "wrong", "avg_busbw_gbps", "errors")})
    series: dict[str, list[tuple[float, float]]] = {}
    for row in data.get("rows", []):
        series.setdefault(row["collective"], []).append((math.log2(row["size"]), row["busbw"]))
    if series:
        check.html.append(("svg", (line_chart(series, title="Bus bandwidth by message size", x_label="log2(bytes)",
                                              y_label="GB/s"), "busbw per collective (nccl-tests definition)")))
    check.html.append(("table", (["collective", "size B", "time us", "algbw GB/s", "busbw GB/s", "#wrong"],
                                 [[r["collective"], r["size"], r["time_us"], r["algbw"], r["busbw"], r["wrong"]] for r in data.get("rows", [])])))
    return check


_CHECKERS: dict[str, Callable[[dict[str, Any]], Check]] = {
    "correctness": check_correctness,
    "precision": check_precision,
    "performance": check_performance,
    "stability": check_stability,
    "collectives": check_collectives,
}


def evaluate(spec: Spec) -> AcceptReport:
    """Run every check of the spec. Input files that do not load are UserErrors (exit 2)."""
    checks = []
    for section, entries in spec.sections.items():
        for entry in entries:
            started = time.perf_counter()
            check = _CHECKERS[section](entry)
            check.seconds = time.perf_counter() - started
            checks.append(check)
    return AcceptReport(spec=spec, checks=checks, created=time.strftime("%Y-%m-%d %H:%M:%S %z"))


# --------------------------------------------------------------------------- rendering


def render_html(report: AcceptReport) -> str:
    from accelport.report.html import HtmlPage
    from accelport.verify.perf import profile

    verdict = report.verdict
    page = HtmlPage(report.spec.title, f"accelport {__version__} acceptance report; spec {report.spec.path}; {report.created}")
    counts = report.to_dict()["counts"]
    page.raw('<section id="summary" class="accept-section">')
    page.heading("Verdict", anchor="verdict")
    page.raw(f"<p>{page.badge(verdict.upper(), _badge_kind(verdict))}</p>")
    page.cards([("checks", len(report.checks)), ("passed", counts["pass"]), ("failed", counts["fail"]),
                ("inconclusive", counts["inconclusive"]), ("could not run", counts["error"])])
    page.table(["section", "check", "status", "summary"],
               [[TITLES[c.section], c.name, page.badge(c.status, _badge_kind(c.status)), c.summary] for c in report.checks],
               raw_columns=(2,))
    page.raw("</section>")
    for section in SECTIONS:
        checks = [c for c in report.checks if c.section == section]
        if not checks:
            continue
        page.raw(f'<section id="{section}" class="accept-section">')
        page.heading(TITLES[section], anchor=f"h-{section}")
        for check in checks:
            page.heading(check.name, level=3)
            page.raw(f"<p>{page.badge(check.status, _badge_kind(check.status))} </p>")
            page.paragraph(check.summary)
            for kind, payload in check.html:
                if kind == "svg":
                    page.svg(*payload)
                elif kind == "table":
                    page.table(*payload)
                elif kind == "code":
                    page.code_block(payload)
                elif kind == "cards":
                    page.cards(payload)
                elif kind == "profile-diff":
                    page.paragraph("Per-op breakdown of the step-time difference (accelport profile-diff):")
                    profile.add_diff_to_page(page, *payload)
        page.raw("</section>")
    return page.render()


def _badge_kind(status: str) -> str:
    return {"pass": "pass", "inconclusive": "warn"}.get(status, "fail")


def render_junit(report: AcceptReport) -> str:
    from accelport.report import junit

    suites: dict[str, list[junit.Case]] = {}
    for check in report.checks:
        details = json.dumps(check.figures, indent=2, default=str)
        suites.setdefault(f"accept.{check.section}", []).append(
            junit.Case(
                name=check.name,
                classname=f"accelport.accept.{check.section}",
                seconds=check.seconds,
                failure=None if check.passed else f"{check.status}: {check.summary}",
                details=details,
            )
        )
    return junit.render(suites, name=f"accelport accept: {report.spec.title}")


def render_text(report: AcceptReport) -> str:
    from accelport.report.table import text_table

    rows = [[c.section, c.name, c.status.upper(), c.summary] for c in report.checks]
    return f"{report.spec.title}: {report.verdict.upper()}\n\n" + text_table(["section", "check", "status", "summary"], rows, max_width=110)


def write_reports(report: AcceptReport, out_dir: Path) -> dict[str, Path]:
    """report.html, report.junit.xml and report.json in `out_dir` (each written atomically)."""
    from accelport.fileio import atomic_write_text

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"html": out_dir / "report.html", "junit": out_dir / "report.junit.xml", "json": out_dir / "report.json"}
    atomic_write_text(paths["html"], render_html(report))
    atomic_write_text(paths["junit"], render_junit(report))
    atomic_write_text(paths["json"], json.dumps(report.to_dict(), indent=2, default=str) + "\n")
    return paths
