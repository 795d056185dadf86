"""Step-time benchmarks with a confidence interval, compared against a baseline from another machine.

Two ways in:

* Python: `run(step_fn, ...)` calls `step_fn` repeatedly (warm-up first,
  device synchronised around every step) until the bootstrap confidence
  interval of the median step time is tight, or the step/time budget ends.
* A script: `accelport bench -- python train.py`. The script marks its steps
  with one line, `accelport.verify.perf.bench.step()`, at the end of each
  iteration. Outside accelport that call does nothing measurable. Under
  `accelport bench`, `soak` or `profile` it synchronises the device, records
  the step (time, memory, loss when given) and returns False once the
  harness has what it needs. A script without markers is timed as a whole,
  one run per sample.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import math
import os
import platform
import random
import resource
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from accelport import __version__
from accelport.errors import ParameterHint, UserError
from accelport.verify.saved import read_saved, rerun, saved_by

log = logging.getLogger(__name__)

ENV_LOG = "ACCELPORT_STEP_LOG"  # JSONL file the marker appends one line per step to
ENV_CONTROL = "ACCELPORT_STEP_CONTROL"  # JSON: when step() should start returning False
RESULT_KIND = "accelport.bench"
# Stop reasons of StopRule (and run_command) that mean the CI never got as narrow as asked.
UNCONVERGED = ("max-steps", "budget", "process-ended")
DEFAULT_FLOOR = 0.6  # a migration "passes" at 60% of the baseline throughput unless the scenario says otherwise

# --------------------------------------------------------------------------- the step marker


def _synchronize() -> None:
    torch = sys.modules.get("torch")  # never import torch for a script that does not use it
    if torch is None:
        return
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and accelerator.is_available():
        accelerator.synchronize()


def host_rss_bytes() -> int:
    """Resident set size of this process now (Linux /proc), else the peak so far."""
    try:
        with open("/proc/self/statm", "rb") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return peak_host_rss_bytes()


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


def _mallinfo2():
    try:
        libc = ctypes.CDLL(None)
        function = libc.mallinfo2
    except (OSError, AttributeError):  # not glibc >= 2.33
        return None
    function.restype = _MallInfo2
    return function


_MALLINFO2 = _mallinfo2() if sys.platform.startswith("linux") else None


def host_heap_bytes() -> int | None:
    """Bytes malloc has handed out and not taken back (glibc), or None.

    RSS misses a leak that reuses pages freed earlier; in-use heap bytes do not.
    """
    if _MALLINFO2 is None:
        return None
    info = _MALLINFO2()
    return int(info.uordblks + info.hblkhd)


def peak_host_rss_bytes() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def device_memory() -> dict[str, int]:
    """Allocated, reserved and peak device memory through torch.accelerator ({} on CPU)."""
    torch = sys.modules.get("torch")
    accelerator = getattr(torch, "accelerator", None) if torch is not None else None
    if accelerator is None or not accelerator.is_available():
        return {}
    try:
        return {
            "device_allocated": int(accelerator.memory_allocated()),
            "device_reserved": int(accelerator.memory_reserved()),
            "device_peak": int(accelerator.max_memory_allocated()),
        }
    except (RuntimeError, AttributeError):  # a backend without memory statistics
        return {}


def _scalar(value: Any) -> float | None:
    if value is None:
        return None
    try:
        return float(value.item() if hasattr(value, "item") else value)
    except (TypeError, ValueError):
        return None


class _Marker:
    """State of `step()` in one process: where to log, and when to say stop."""

    def __init__(self) -> None:
        self.path = os.environ.get(ENV_LOG)
        control = os.environ.get(ENV_CONTROL)
        self.control: dict[str, Any] = json.loads(control) if control else {}
        self.enabled = bool(self.path)
        self.handle = open(self.path, "a", encoding="utf-8") if self.path else None  # noqa: SIM115
        self.count = 0
        self.last: float | None = None
        self.times: list[float] = []
        self.started = time.time()
        rule = self.control.get("stop_rule")
        self.rule = StopRule(**rule) if rule else None

    def mark(self, **values: Any) -> bool:
        keep_going = True
        for hook in list(_hooks):
            if hook() is False:
                keep_going = False
        if not self.enabled:
            return keep_going
        _synchronize()
        now = time.perf_counter()
        dt = None if self.last is None else now - self.last
        self.last = now
        record: dict[str, Any] = {"step": self.count, "t": time.time(), "dt": dt, "rss": host_rss_bytes(), "heap": host_heap_bytes()}
        record.update(device_memory())
        for key, value in values.items():
            if value is not None:
                record[key] = _scalar(value) if key in ("loss", "grad_norm") else value
        self.handle.write(json.dumps(record) + "\n")
        self.handle.flush()
        self.count += 1
        if dt is not None:
            self.times.append(dt)
        max_steps = self.control.get("max_steps")
        deadline = self.control.get("deadline")
        if max_steps is not None and self.count >= max_steps:
            keep_going = False
        if deadline is not None and time.time() >= deadline:
            keep_going = False
        if self.rule is not None and self.rule.done(self.times, time.time() - self.started):
            keep_going = False
        return keep_going


_marker: _Marker | None = None
_hooks: list[Callable[[], bool | None]] = []


def step(*, loss: Any = None, grad_norm: Any = None, samples: int | None = None, tokens: int | None = None) -> bool:
    """Mark the end of one step. Returns False when the accelport harness has enough steps.

    `loss` and `grad_norm` (floats or 0-d tensors) feed `accelport soak`'s NaN and
    spike checks; `samples` and `tokens` (per step) give throughput. Outside an
    accelport harness this returns True and does nothing else (no device sync).
    """
    global _marker
    if _marker is None:
        _marker = _Marker()
    return _marker.mark(loss=loss, grad_norm=grad_norm, samples=samples, tokens=tokens)


def add_step_hook(hook: Callable[[], bool | None]) -> None:
    """Run `hook` at every `step()`; returning False asks the loop to stop (used by `accelport profile`)."""
    _hooks.append(hook)


# --------------------------------------------------------------------------- statistics


def bootstrap_median_ci(values: Sequence[float], level: float = 0.95, resamples: int = 1000, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of the median (deterministic for a given seed)."""
    if not values:
        return (math.nan, math.nan)
    if len(values) == 1:
        return (values[0], values[0])
    rng = random.Random(seed)
    k = len(values)
    medians = sorted(statistics.median(rng.choices(values, k=k)) for _ in range(resamples))
    low = medians[max(0, math.floor((1 - level) / 2 * resamples))]
    high = medians[min(resamples - 1, math.ceil((1 + level) / 2 * resamples) - 1)]
    return (low, high)


@dataclass(frozen=True)
class StopRule:
    """When to stop measuring: CI tight enough (after min_steps), or max_steps, or the time budget."""

    warmup: int = 3
    min_steps: int = 10
    max_steps: int = 1000
    budget_s: float = 60.0
    target_ci: float = 0.05  # width of the 95% CI of the median, relative to the median

    def measured(self, times: Sequence[float]) -> list[float]:
        return list(times[self.warmup :])

    def reason(self, times: Sequence[float], elapsed_s: float) -> str | None:
        measured = self.measured(times)
        if len(measured) >= self.max_steps:
            return "max-steps"
        if elapsed_s >= self.budget_s:
            return "budget"
        if len(measured) >= self.min_steps:
            # Recomputing the bootstrap every step would cost more than small steps; every ~10%.
            if len(measured) != self.min_steps and len(measured) % max(1, len(measured) // 10):
                return None
            low, high = bootstrap_median_ci(measured, resamples=400)
            median = statistics.median(measured)
            if median > 0 and (high - low) / median <= self.target_ci:
                return "converged"
        return None

    def done(self, times: Sequence[float], elapsed_s: float) -> bool:
        return self.reason(times, elapsed_s) is not None


@dataclass
class BenchResult:
    """Step-time statistics of one scenario on one machine (saved as JSON, compared across machines)."""

    scenario: str
    times_s: list[float]
    warmup: int
    stop_reason: str
    samples_per_step: float | None = None
    tokens_per_step: float | None = None
    peak_device_memory_bytes: int | None = None
    peak_host_rss_bytes: int | None = None
    machine: dict[str, Any] = field(default_factory=dict)
    command: list[str] | None = None
    unit: str = "step"  # "step" with markers or the Python API; "run" for a whole command
    params: dict[str, str] = field(default_factory=dict)  # what defines the scenario: model, shape, batch, ...
    source: str | None = field(default=None, compare=False)  # the file it was loaded from (not saved)

    @property
    def median_s(self) -> float:
        return statistics.median(self.times_s) if self.times_s else math.nan

    @property
    def ci_s(self) -> tuple[float, float]:
        return bootstrap_median_ci(self.times_s)

    @property
    def converged(self) -> bool:
        return self.stop_reason == "converged"

    def throughput(self, per_step: float | None) -> dict[str, float] | None:
        if not per_step or not self.times_s:
            return None
        low, high = self.ci_s
        return {"median": per_step / self.median_s, "ci_low": per_step / high, "ci_high": per_step / low}

    def to_dict(self) -> dict[str, Any]:
        times = self.times_s
        low, high = self.ci_s
        median = self.median_s
        mean = statistics.fmean(times) if times else math.nan
        stdev = statistics.stdev(times) if len(times) > 1 else 0.0
        quartiles = statistics.quantiles(times, n=4) if len(times) > 1 else [median, median, median]
        iqr = quartiles[2] - quartiles[0]
        outliers = sum(1 for t in times if t < quartiles[0] - 1.5 * iqr or t > quartiles[2] + 1.5 * iqr)
        spread = (max(times) / min(times)) if times and min(times) > 0 else math.nan
        return {
            "kind": RESULT_KIND,
            "version": 1,
            "scenario": self.scenario,
            "params": self.params,
            "unit": self.unit,
            "steps": len(times),
            "warmup": self.warmup,
            "stop_reason": self.stop_reason,
            "converged": self.converged,
            "median_s": median,
            "ci_low_s": low,
            "ci_high_s": high,
            "ci_level": 0.95,
            "ci_rel_width": (high - low) / median if median else math.nan,
            "mean_s": mean,
            "stdev_s": stdev,
            "cv": stdev / mean if mean else math.nan,
            "min_s": min(times) if times else math.nan,
            "max_s": max(times) if times else math.nan,
            "iqr_s": iqr,
            "outliers": outliers,
            # A shared or throttled host shows up as a wide spread between fast and slow steps.
            "noisy": bool(spread > 2.0 or (stdev / mean if mean else 0) > 0.15),
            "samples_per_step": self.samples_per_step,
            "tokens_per_step": self.tokens_per_step,
            "samples_per_s": self.throughput(self.samples_per_step),
            "tokens_per_s": self.throughput(self.tokens_per_step),
            "peak_device_memory_bytes": self.peak_device_memory_bytes,
            "peak_host_rss_bytes": self.peak_host_rss_bytes,
            "machine": self.machine,
            "command": self.command,
            "times_s": times,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "<dict>") -> BenchResult:
        if not isinstance(data, dict) or data.get("kind") != RESULT_KIND:
            raise UserError(f"{source}: not an accelport bench result (kind != {RESULT_KIND!r}); {saved_by('bench')}")
        times = data.get("times_s")
        if not isinstance(times, list) or not times or not all(isinstance(t, int | float) and t > 0 for t in times):
            raise UserError(f"{source}: bench result has no valid times_s; {rerun('bench')}")
        params = data.get("params") or {}
        if not isinstance(params, dict):
            raise UserError(f"{source}: bench result: 'params' must be an object; {rerun('bench')}")
        return cls(
            scenario=str(data.get("scenario", "default")),
            times_s=[float(t) for t in times],
            warmup=int(data.get("warmup", 0)),
            stop_reason=str(data.get("stop_reason", "")),
            samples_per_step=data.get("samples_per_step"),
            tokens_per_step=data.get("tokens_per_step"),
            peak_device_memory_bytes=data.get("peak_device_memory_bytes"),
            peak_host_rss_bytes=data.get("peak_host_rss_bytes"),
            machine=data.get("machine") or {},
            command=data.get("command"),
            unit=str(data.get("unit", "step")),
            params={str(k): str(v) for k, v in params.items()},
            source=source,
        )


def load_result(path: str | Path) -> BenchResult:
    return BenchResult.from_dict(read_saved(path, "bench", RESULT_KIND), str(path))


PASS, FAIL, INCONCLUSIVE = "pass", "fail", "inconclusive"


@dataclass(frozen=True)
class Comparison:
    """Test throughput relative to a baseline, judged against a floor with the ratio's CI.

    pass: the whole 95% CI of the ratio is at or above the floor; fail: the whole CI is below
    it; inconclusive: the floor lies inside the CI, so more measurements could go either way
    (`steps_to_decide` says about how many).
    """

    scenario: str
    ratio: float
    ci_low: float
    ci_high: float
    floor: float
    basis: str  # "samples/s", "tokens/s" or "step time"
    test_median_s: float
    baseline_median_s: float
    memory_ratio: float | None
    mismatch: tuple[str, ...] = ()  # how the two scenarios differ, when compared anyway (allow_mismatch)
    steps: int = 0  # measured steps of the side with fewer

    @property
    def verdict(self) -> str:
        if self.ci_low >= self.floor:
            return PASS
        if self.ci_high < self.floor:
            return FAIL
        return INCONCLUSIVE

    @property
    def passed(self) -> bool:
        return self.verdict == PASS

    @property
    def floor_within_ci(self) -> bool:
        """The verdict could flip with more measurements: the floor lies inside the ratio's CI."""
        return self.verdict == INCONCLUSIVE

    @property
    def steps_to_decide(self) -> int | None:
        """About how many more steps per side would put the floor outside the CI (0: decided).

        The CI of a median narrows as 1/sqrt(steps); on the log scale its half-width h must
        shrink below the distance d between the ratio and the floor: steps * (h/d)^2 in all,
        if the ratio stays where it is. None when the ratio sits on the floor (no number of
        steps decides) or nothing was measured.
        """
        if self.verdict != INCONCLUSIVE:
            return 0
        if self.steps <= 0 or not (self.ratio > 0 and self.ci_low > 0 and self.ci_high > 0):
            return None
        distance = abs(math.log(self.ratio) - math.log(self.floor))
        if distance < 1e-9:
            return None
        half_width = (math.log(self.ci_high) - math.log(self.ci_low)) / 2
        return max(1, math.ceil(self.steps * (half_width / distance) ** 2) - self.steps)

    def describe(self) -> str:
        """The verdict in words, with what to do when it is inconclusive."""
        if self.verdict != INCONCLUSIVE:
            return self.verdict
        more = self.steps_to_decide
        advice = (f"about {more} more steps per side would decide, if the ratio holds" if more
                  else "the ratio sits on the floor: no number of steps decides; change the floor or the code")
        return f"inconclusive: the floor {self.floor:.2f} lies inside the CI; {advice}"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["mismatch"] = list(self.mismatch)
        data.update(passed=self.passed, verdict=self.verdict, floor_within_ci=self.floor_within_ci,
                    steps_to_decide=self.steps_to_decide)
        return data


def scenario_differences(test: BenchResult, baseline: BenchResult) -> list[str]:
    """How the two results' scenarios differ (name, unit, params, batch): empty when like compares with like."""
    out = []
    if test.scenario != baseline.scenario:
        out.append(f"scenario {test.scenario!r} vs {baseline.scenario!r}")
    if test.unit != baseline.unit:
        out.append(f"timed per {test.unit} vs per {baseline.unit}")
    for key in sorted(set(test.params) | set(baseline.params)):
        mine, theirs = test.params.get(key), baseline.params.get(key)
        if mine != theirs:
            out.append(f"{key} {mine if mine is not None else '(unset)'} vs {theirs if theirs is not None else '(unset)'}")
    for label, mine, theirs in (("samples per step (batch)", test.samples_per_step, baseline.samples_per_step),
                                ("tokens per step", test.tokens_per_step, baseline.tokens_per_step)):
        if mine and theirs and mine != theirs:
            out.append(f"{label} {mine:g} vs {theirs:g}")
    return out


def compare(test: BenchResult, baseline: BenchResult, floor: float = DEFAULT_FLOOR, *,
            allow_mismatch: bool = False) -> Comparison:
    """Throughput ratio test/baseline (per sample when both give samples per step, else per step).

    Results of different scenarios (name, unit, params, samples or tokens per step) are refused
    with a UserError unless `allow_mismatch`; then the differences are listed in the comparison.
    """
    if not floor > 0:
        raise UserError(f"floor must be positive (got {floor}); use e.g. 0.6 for 60% of the baseline")
    differences = scenario_differences(test, baseline)
    if differences and not allow_mismatch:
        raise ParameterHint(
            f"{test.source or 'test result'} vs baseline {baseline.source or 'result'}: different scenarios "
            f"({'; '.join(differences)}); benchmark the same scenario on both machines, or allow the mismatch "
            "to compare throughput anyway (in an accept spec: allow_mismatch = true)", "allow_mismatch"
        )
    t_low, t_high = test.ci_s
    b_low, b_high = baseline.ci_s
    for per_step, basis in ((test.tokens_per_step, "tokens/s"), (test.samples_per_step, "samples/s")):
        other = baseline.tokens_per_step if basis == "tokens/s" else baseline.samples_per_step
        if per_step and other:
            scale = per_step / other
            break
    else:
        scale, basis = 1.0, "step time"
    ratio = scale * baseline.median_s / test.median_s
    memory = None
    if test.peak_device_memory_bytes and baseline.peak_device_memory_bytes:
        memory = test.peak_device_memory_bytes / baseline.peak_device_memory_bytes
    return Comparison(
        scenario=test.scenario,
        ratio=ratio,
        ci_low=scale * b_low / t_high,
        ci_high=scale * b_high / t_low,
        floor=floor,
        basis=basis,
        test_median_s=test.median_s,
        baseline_median_s=baseline.median_s,
        memory_ratio=memory,
        mismatch=tuple(differences),
        steps=min(len(test.times_s), len(baseline.times_s)),
    )


# --------------------------------------------------------------------------- running


def machine_facts() -> dict[str, Any]:
    facts: dict[str, Any] = {
        "host": platform.node(),
        "platform": f"{platform.system()} {platform.machine()}",
        "python": platform.python_version(),
        "accelport": __version__,
        "cpu_count": os.cpu_count(),
    }
    torch = sys.modules.get("torch")
    if torch is not None:
        facts["torch"] = torch.__version__
        accelerator = getattr(torch, "accelerator", None)
        current = accelerator.current_accelerator() if accelerator is not None and accelerator.is_available() else None
        facts["device"] = current.type if current is not None else "cpu"
    return facts


def run(
    step_fn: Callable[[], Any],
    *,
    scenario: str = "default",
    rule: StopRule | None = None,
    samples_per_step: float | None = None,
    tokens_per_step: float | None = None,
    params: dict[str, str] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> BenchResult:
    """Benchmark `step_fn` (see the module docstring); the device is synchronised around each call.

    `params` (model, shape, batch, ...) define the scenario with its name: `compare` refuses
    a baseline whose scenario differs. `clock` (seconds, monotonic) times the steps and the
    budget; tests plant exact step times with their own.
    """
    rule = rule or StopRule()
    _reset_peak()
    times: list[float] = []
    started = clock()
    reason = None
    while reason is None:
        _synchronize()
        t0 = clock()
        step_fn()
        _synchronize()
        times.append(clock() - t0)
        if len(times) == rule.warmup:
            _reset_peak()
        reason = rule.reason(times, clock() - started)
    memory = device_memory()
    return BenchResult(
        scenario=scenario,
        times_s=rule.measured(times),
        warmup=rule.warmup,
        stop_reason=reason,
        samples_per_step=samples_per_step,
        tokens_per_step=tokens_per_step,
        peak_device_memory_bytes=memory.get("device_peak"),
        peak_host_rss_bytes=peak_host_rss_bytes(),
        machine=machine_facts(),
        params=dict(params or {}),
    )


def _reset_peak() -> None:
    torch = sys.modules.get("torch")
    accelerator = getattr(torch, "accelerator", None) if torch is not None else None
    if accelerator is not None and accelerator.is_available():
        with contextlib.suppress(RuntimeError, AttributeError):
            accelerator.reset_peak_memory_stats()


def read_step_log(path: Path, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
    """Complete JSON lines appended to a step log since `offset`; returns them and the new offset."""
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            data = handle.read()
    except FileNotFoundError:
        return [], offset
    end = data.rfind(b"\n") + 1
    records = []
    for line in data[:end].splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            log.warning("%s: skipping a malformed step line", path)
    return records, offset + end


def stop_process(proc: subprocess.Popen, grace_s: float = 5.0) -> None:
    """SIGTERM the process group, then SIGKILL after `grace_s`."""
    if proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def check_command(command: Sequence[str]) -> list[str]:
    if not command:
        raise UserError("no command given; put it after --, e.g. `accelport bench -- python train.py`")
    return list(command)


def run_command(
    command: Sequence[str],
    workdir: Path,
    *,
    scenario: str = "default",
    rule: StopRule | None = None,
    samples_per_step: float | None = None,
    tokens_per_step: float | None = None,
    params: dict[str, str] | None = None,
) -> BenchResult:
    """Benchmark a command: per marked step when it calls `bench.step()`, else one sample per run."""
    command = check_command(command)
    rule = rule or StopRule()
    workdir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    run_times: list[float] = []
    peak_rss = 0
    while True:
        log_path = workdir / f"steps-{len(run_times)}.jsonl"
        log_path.unlink(missing_ok=True)
        env = dict(os.environ)
        env[ENV_LOG] = str(log_path)
        remaining = max(1.0, rule.budget_s - (time.monotonic() - started))
        env[ENV_CONTROL] = json.dumps({"stop_rule": asdict(StopRule(**{**asdict(rule), "budget_s": remaining}))})
        t0 = time.perf_counter()
        try:
            proc = subprocess.Popen(command, env=env, start_new_session=True)
        except OSError as exc:
            raise UserError(f"{command[0]}: cannot start ({exc.strerror}); check the command after --") from None
        records: list[dict[str, Any]] = []
        offset = 0
        try:
            while proc.poll() is None:
                new, offset = read_step_log(log_path, offset)
                records.extend(new)
                times = [r["dt"] for r in records if r.get("dt") is not None]
                if times and rule.done(times, time.monotonic() - started + 0.0):
                    stop_process(proc)
                    break
                if time.monotonic() - started > rule.budget_s + 60:
                    stop_process(proc)
                    break
                time.sleep(0.05)
        finally:
            stop_process(proc)
        elapsed = time.perf_counter() - t0
        new, offset = read_step_log(log_path, offset)
        records.extend(new)
        if records:
            times = [r["dt"] for r in records if r.get("dt") is not None]
            if proc.returncode is not None and proc.returncode > 0 and not rule.done(times, time.monotonic() - started):
                raise UserError(f"{' '.join(command)}: exited with code {proc.returncode} after {len(records)} step(s); fix the script and re-run")
            if len(times) <= rule.warmup:
                raise ParameterHint(f"{' '.join(command)}: only {len(times)} measured step interval(s) for {rule.warmup} warm-up steps; run more steps or lower the warm-up", "warmup")
            peaks = [r.get("device_peak") for r in records[rule.warmup :] if r.get("device_peak") is not None]
            samples = samples_per_step or _per_step(records, "samples")
            tokens = tokens_per_step or _per_step(records, "tokens")
            return BenchResult(
                scenario=scenario,
                times_s=rule.measured(times),
                warmup=rule.warmup,
                stop_reason=rule.reason(times, time.monotonic() - started) or "process-ended",
                samples_per_step=samples,
                tokens_per_step=tokens,
                peak_device_memory_bytes=max(peaks) if peaks else None,
                peak_host_rss_bytes=max((r.get("rss", 0) for r in records), default=None),
                machine=machine_facts(),
                command=command,
                unit="step",
                params=dict(params or {}),
            )
        if proc.returncode != 0:
            raise UserError(f"{' '.join(command)}: exited with code {proc.returncode}; fix the command and re-run")
        # No markers: the whole run is one sample.
        run_times.append(elapsed)
        peak_rss = max(peak_rss, _children_peak_rss())
        whole = StopRule(warmup=min(rule.warmup, 1), min_steps=min(rule.min_steps, 5), max_steps=rule.max_steps,
                         budget_s=rule.budget_s, target_ci=rule.target_ci)
        reason = whole.reason(run_times, time.monotonic() - started)
        if reason is not None:
            measured = whole.measured(run_times) or run_times
            return BenchResult(
                scenario=scenario,
                times_s=measured,
                warmup=whole.warmup if len(run_times) > whole.warmup else 0,
                stop_reason=reason,
                samples_per_step=samples_per_step,
                tokens_per_step=tokens_per_step,
                peak_host_rss_bytes=peak_rss or None,
                machine=machine_facts(),
                command=command,
                unit="run",
                params=dict(params or {}),
            )


def _per_step(records: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in records if isinstance(r.get(key), int | float)]
    return statistics.median(values) if values else None


def _children_peak_rss() -> int:
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)
