"""Long runs without OOM, hang, NaN or drift: sample every step, fit robust slopes, watch a heartbeat.

Each step gives a sample: step time, host RSS, device memory (allocated,
reserved, peak, through torch.accelerator) and, when the step reports them,
loss and grad norm. The verdict fails on:

* a hang: no step within `hang_timeout_s`; the Python stacks of every thread
  are captured with faulthandler (in-process) or by SIGABRT to a child run
  with PYTHONFAULTHANDLER=1 (command mode);
* OOM: torch.OutOfMemoryError / MemoryError, or a child killed by SIGKILL;
  with CUDA's allocator a memory snapshot is written;
* NaN/Inf in loss or grad norm, and loss spikes (robust rolling z-score);
* memory growth (host RSS, malloc'd heap bytes, device memory): a Theil–Sen slope whose 95% interval is above zero, still
  growing in the second half, and projected above `max_memory_growth_bytes`;
* step-time drift above `max_time_drift` (relative change over the run) and `min_time_drift_s`.

Memory stays bounded on runs of any length (72 h and more): every sample passes
the checks above as it comes, but only `max_samples` evenly spaced ones are kept
for the fits, the plots and the saved result (see `Samples`).
"""

from __future__ import annotations

import collections
import contextlib
import faulthandler
import json
import math
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from accelport.errors import InvalidValue, UserError
from accelport.verify.perf import bench
from accelport.verify.saved import check_fields, read_saved, rerun, saved_by

RESULT_KIND = "accelport.soak"
MEMORY_SERIES = ("rss", "heap", "device_allocated", "device_reserved")


@dataclass(frozen=True)
class SoakLimits:
    warmup_steps: int = 5  # allocator and cache warm-up: not part of the drift fits
    hang_timeout_s: float = 300.0
    max_time_drift: float = 0.25  # relative step-time change over the run
    min_time_drift_s: float = 0.002  # ...and at least this much slower per step: sub-millisecond steps drift with machine load alone
    max_memory_growth_bytes: int = 16 << 20  # projected growth over the run, per memory series
    spike_z: float = 6.0  # robust z-score (median/MAD) of a loss spike
    spike_min_rel: float = 0.5  # ...and at least this far above the rolling median, relatively
    spike_window: int = 20
    max_spikes: int = 0
    stop_on_nonfinite: bool = True
    max_samples: int = 4096  # samples kept for the fits, plots and --save; a 72 h run keeps no more than this


@dataclass(frozen=True)
class Slope:
    """Theil–Sen slope per step with Sen's 95% interval; `growth` is slope x measured steps."""

    per_step: float
    low: float
    high: float
    late: float  # slope over the second half: is it still growing at the end?
    growth: float
    relative: float | None  # growth / median value

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def theil_sen(xs: Sequence[float], ys: Sequence[float], max_pairs: int = 20000, seed: int = 0) -> tuple[float, float, float]:
    """Median of pairwise slopes, with Sen's (1968) 95% confidence interval.

    Beyond `max_pairs` pairs a fixed-seed random sample of pairs is used, the
    interval's rank offsets scaled to the sample.
    """
    n = len(xs)
    if n < 3:
        return (math.nan, math.nan, math.nan)
    total = n * (n - 1) // 2
    if total <= max_pairs:
        pairs = ((i, j) for i in range(n) for j in range(i + 1, n))
    else:
        rng = random.Random(seed)
        pairs = ((i, j) if i < j else (j, i) for i, j in (rng.sample(range(n), 2) for _ in range(max_pairs)))
    slopes = sorted((ys[j] - ys[i]) / (xs[j] - xs[i]) for i, j in pairs if xs[j] != xs[i])
    if not slopes:
        return (math.nan, math.nan, math.nan)
    count = len(slopes)
    spread = 1.96 * math.sqrt(n * (n - 1) * (2 * n + 5) / 18.0) * count / total
    low = slopes[max(0, math.floor((count - spread) / 2))]
    high = slopes[min(count - 1, math.ceil((count + spread) / 2))]
    return (statistics.median(slopes), low, high)


def fit_slope(steps: Sequence[float], values: Sequence[float]) -> Slope | None:
    if len(values) < 4:
        return None
    slope, low, high = theil_sen(steps, values)
    half = len(values) // 2
    late, _, _ = theil_sen(steps[half:], values[half:])
    growth = slope * (steps[-1] - steps[0])
    median = statistics.median(values)
    return Slope(slope, low, high, late if not math.isnan(late) else 0.0, growth, growth / median if median else None)


class Samples:
    """Every step's sample goes in; what stays in memory is bounded, however long the run.

    All warm-up samples and at most `limit` later ones are kept, evenly spaced over
    the run: when the buffer is full every other sample is dropped and from then on
    only every 2nd (4th, ...) new one is kept. The latest sample is always at hand.
    Counts, duration, peaks and step-time mean/min/max are exact, kept as running totals.
    """

    PEAKS = ("rss", "heap", "device_allocated", "device_reserved", "device_peak")

    def __init__(self, warmup: int = 0, limit: int = 4096) -> None:
        if limit < 4:
            raise UserError(f"max_samples {limit}: keep at least 4 samples for the fits")
        self.warmup = warmup
        self.limit = limit
        self.stride = 1
        self.count = 0
        self.warm: list[dict[str, Any]] = []
        self.kept: list[tuple[int, dict[str, Any]]] = []  # (index among the measured samples, sample)
        self.first: dict[str, Any] | None = None
        self.last: dict[str, Any] | None = None
        self.peaks: dict[str, float] = {}
        self.dt_count = 0
        self.dt_sum = 0.0
        self.dt_min = math.inf
        self.dt_max = -math.inf

    def __len__(self) -> int:
        return self.count

    def append(self, sample: dict[str, Any]) -> None:
        index = self.count - self.warmup
        self.count += 1
        if self.first is None:
            self.first = sample
        self.last = sample
        for key in self.PEAKS:
            value = sample.get(key)
            if isinstance(value, int | float) and value > self.peaks.get(key, -math.inf):
                self.peaks[key] = value
        if index < 0:
            self.warm.append(sample)
            return
        dt = sample.get("dt")
        if isinstance(dt, int | float):
            self.dt_count += 1
            self.dt_sum += dt
            self.dt_min = min(self.dt_min, dt)
            self.dt_max = max(self.dt_max, dt)
        if index % self.stride:
            return
        self.kept.append((index, sample))
        if len(self.kept) > self.limit:
            self.stride *= 2
            self.kept = [(i, kept) for i, kept in self.kept if i % self.stride == 0]

    def measured(self) -> list[dict[str, Any]]:
        """The kept samples after warm-up and the latest one, in step order."""
        out = [sample for _, sample in self.kept]
        if self.count > self.warmup and out[-1] is not self.last:
            out.append(self.last)
        return out

    def all_kept(self) -> list[dict[str, Any]]:
        """Warm-up samples, then the measured ones (what plots and --save get)."""
        return self.warm + self.measured()

    @property
    def duration_s(self) -> float:
        if self.first is None or self.last is None or self.first is self.last:
            return 0.0
        return float(self.last["t"] - self.first["t"])


@dataclass
class SoakResult:
    samples: Samples
    limits: SoakLimits
    stop_reason: str  # "steps", "duration", "hang", "oom", "nonfinite", "crash", "process-ended"
    hang: dict[str, Any] | None = None
    oom: dict[str, Any] | None = None
    crash: dict[str, Any] | None = None
    nonfinite: dict[str, Any] | None = None
    spikes: list[dict[str, Any]] = field(default_factory=list)
    command: list[str] | None = None

    def measured(self) -> list[dict[str, Any]]:
        return self.samples.measured()

    def slopes(self) -> dict[str, Slope]:
        measured = self.measured()
        fits: dict[str, Slope] = {}
        timed = [(s["step"], s["dt"]) for s in measured if s.get("dt") is not None]
        if timed:
            fit = fit_slope([x for x, _ in timed], [y for _, y in timed])
            if fit:
                fits["step_time"] = fit
        for key in MEMORY_SERIES:
            series = [(s["step"], s[key]) for s in measured if s.get(key) is not None]
            if series:
                fit = fit_slope([x for x, _ in series], [y for _, y in series])
                if fit:
                    fits[key] = fit
        return fits

    def failures(self) -> list[str]:
        reasons = []
        if self.hang:
            reasons.append(f"hang: no step for {self.hang['waited_s']:.1f} s after step {self.hang['last_step']}")
        if self.oom:
            reasons.append(f"out of memory at step {self.oom.get('step')}: {self.oom.get('message', '')}")
        if self.crash:
            reasons.append(f"crashed with exit code {self.crash['exit_code']}")
        if self.nonfinite:
            reasons.append(f"non-finite {self.nonfinite['what']} ({self.nonfinite['value']}) at step {self.nonfinite['step']}")
        if len(self.spikes) > self.limits.max_spikes:
            reasons.append(f"{len(self.spikes)} loss spike(s) (allowed {self.limits.max_spikes}), first at step {self.spikes[0]['step']}")
        for key, fit in self.slopes().items():
            if key == "step_time":
                if (
                    fit.low > 0
                    and fit.late > 0
                    and fit.relative is not None
                    and fit.relative > self.limits.max_time_drift
                    and fit.growth > self.limits.min_time_drift_s
                ):
                    reasons.append(
                        f"step time drifts up {fit.relative * 100:.0f}% ({fit.growth * 1e3:.1f} ms per step) over the run "
                        f"(limit {self.limits.max_time_drift * 100:.0f}% and {self.limits.min_time_drift_s * 1e3:g} ms)"
                    )
            elif fit.low > 0 and fit.late > 0.25 * fit.per_step and fit.growth > self.limits.max_memory_growth_bytes:
                reasons.append(
                    f"{key} grows {fit.per_step / 1024:.1f} KiB/step ({fit.growth / 2**20:.1f} MiB over the run; "
                    f"limit {self.limits.max_memory_growth_bytes / 2**20:.0f} MiB): a leak"
                )
        return reasons

    @property
    def passed(self) -> bool:
        return not self.failures() and len(self.measured()) > 0

    def to_dict(self) -> dict[str, Any]:
        measured = self.measured()
        times = [s["dt"] for s in measured if s.get("dt") is not None]
        failures = self.failures()
        samples = self.samples
        if not measured and not failures:
            failures = [f"no step after the {self.limits.warmup_steps} warm-up steps; run longer"]
        return {
            "kind": RESULT_KIND,
            "version": 1,
            "verdict": "pass" if not failures else "fail",
            "failures": failures,
            "stop_reason": self.stop_reason,
            "steps": len(samples),
            "duration_s": samples.duration_s,
            "step_time_median_s": statistics.median(times) if times else None,  # of the kept samples
            "step_time_mean_s": samples.dt_sum / samples.dt_count if samples.dt_count else None,  # of every measured step
            "step_time_min_s": samples.dt_min if samples.dt_count else None,
            "step_time_max_s": samples.dt_max if samples.dt_count else None,
            "slopes": {key: fit.to_dict() for key, fit in self.slopes().items()},
            "peak": {key: samples.peaks[key] for key in ("rss", "device_peak") if samples.peaks.get(key)},
            "hang": self.hang,
            "oom": self.oom,
            "crash": self.crash,
            "nonfinite": self.nonfinite,
            "spikes": self.spikes,
            "limits": asdict(self.limits),
            "command": self.command,
            "sample_stride": samples.stride,  # samples holds every Nth measured step (and the last)
            "samples": samples.all_kept(),
        }


class _Checks:
    """Per-sample checks shared by the in-process and command modes."""

    def __init__(self, limits: SoakLimits) -> None:
        self.limits = limits
        self.recent: collections.deque[float] = collections.deque(maxlen=limits.spike_window)
        self.spikes: list[dict[str, Any]] = []
        self.nonfinite: dict[str, Any] | None = None

    def add(self, sample: dict[str, Any]) -> bool:
        """Record one sample; False when the run must stop (non-finite value)."""
        for what in ("loss", "grad_norm"):
            value = sample.get(what)
            if value is not None and not math.isfinite(value) and self.nonfinite is None:
                self.nonfinite = {"step": sample["step"], "what": what, "value": str(value)}
        loss = sample.get("loss")
        if loss is not None and math.isfinite(loss):
            if len(self.recent) >= 10:
                median = statistics.median(self.recent)
                mad = statistics.median(abs(x - median) for x in self.recent)
                threshold = median + max(self.limits.spike_z * 1.4826 * mad, self.limits.spike_min_rel * abs(median))
                if loss > threshold:
                    self.spikes.append({"step": sample["step"], "loss": loss, "rolling_median": median})
            self.recent.append(loss)
        return not (self.nonfinite and self.limits.stop_on_nonfinite)


def _step_values(output: Any) -> dict[str, float | None]:
    if isinstance(output, dict):
        return {"loss": bench._scalar(output.get("loss")), "grad_norm": bench._scalar(output.get("grad_norm"))}
    return {"loss": bench._scalar(output), "grad_norm": None}


class _HangInterrupt(BaseException):
    """Raised in the main thread by the watchdog to leave a step that blocks."""


def _is_oom(exc: BaseException) -> bool:
    torch = sys.modules.get("torch")
    oom_type = getattr(torch, "OutOfMemoryError", None) if torch is not None else None
    return isinstance(exc, MemoryError) or (oom_type is not None and isinstance(exc, oom_type))


def _memory_snapshot(directory: Path | None) -> str | None:
    """Write the CUDA caching allocator's snapshot when it was recording (other backends: None)."""
    torch = sys.modules.get("torch")
    if directory is None or torch is None or not torch.cuda.is_available():
        return None
    try:
        path = directory / "oom-memory-snapshot.pickle"
        torch.cuda.memory._dump_snapshot(str(path))
        return str(path)
    except (RuntimeError, AttributeError):
        return None


def _check_length(steps: int | None, duration_s: float | None) -> None:
    if steps is None and duration_s is None:
        raise UserError("soak needs steps or duration_s: a run must end")
    if steps is not None and steps < 1:
        raise InvalidValue("steps", steps, "must be 1 <= steps")
    if duration_s is not None and not duration_s > 0:
        raise InvalidValue("duration_s", f"{duration_s:g} s", "must be positive, e.g. 90s, 30m, 72h")


def run(
    step_fn: Callable[[], Any],
    *,
    steps: int | None = None,
    duration_s: float | None = None,
    limits: SoakLimits | None = None,
    snapshot_dir: Path | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> SoakResult:
    """Soak `step_fn` in this process; it may return a loss, or a dict with loss and grad_norm.

    The watchdog breaks a blocked step only where a signal wakes it (sleeps, lock
    waits, I/O); a hang inside native code needs the command mode (`run_command`).
    `clock` (seconds) times each step: tests plant step times with their own clock,
    since a loaded machine's real step times drift by themselves.
    """
    _check_length(steps, duration_s)
    limits = limits or SoakLimits()
    torch = sys.modules.get("torch")
    if snapshot_dir is not None and torch is not None and torch.cuda.is_available():
        torch.cuda.memory._record_memory_history(max_entries=100000)
    checks = _Checks(limits)
    samples = Samples(limits.warmup_steps, limits.max_samples)
    beat = [time.monotonic()]
    hang: dict[str, Any] = {}
    stop_watch = threading.Event()
    main = threading.current_thread() is threading.main_thread()
    main_ident = threading.main_thread().ident

    def interrupt(_signum, _frame):
        raise _HangInterrupt

    def watch() -> None:
        while not stop_watch.wait(min(0.2, limits.hang_timeout_s / 4)):
            waited = time.monotonic() - beat[0]
            if waited > limits.hang_timeout_s:
                with tempfile.TemporaryFile("w+") as handle:
                    faulthandler.dump_traceback(file=handle, all_threads=True)
                    handle.seek(0)
                    stacks = handle.read()
                hang.update(waited_s=waited, last_step=len(samples) - 1, stacks=stacks)
                if main:
                    signal.pthread_kill(main_ident, signal.SIGUSR1)
                return

    previous = signal.signal(signal.SIGUSR1, interrupt) if main else None
    watchdog = threading.Thread(target=watch, name="accelport-soak-watchdog", daemon=True)
    watchdog.start()
    started = time.time()
    reason = "steps"
    oom = None
    try:
        while True:
            if steps is not None and len(samples) >= steps:
                reason = "steps"
                break
            if duration_s is not None and time.time() - started >= duration_s:
                reason = "duration"
                break
            beat[0] = time.monotonic()
            t0 = clock()
            try:
                output = step_fn()
                bench._synchronize()
            except _HangInterrupt:
                reason = "hang"
                break
            except BaseException as exc:
                if not _is_oom(exc):
                    raise
                oom = {"step": len(samples), "message": str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__,
                       "snapshot": _memory_snapshot(snapshot_dir)}
                reason = "oom"
                break
            sample = {"step": len(samples), "t": time.time(), "dt": clock() - t0, "rss": bench.host_rss_bytes(),
                      "heap": bench.host_heap_bytes()}
            sample.update(bench.device_memory())
            sample.update({k: v for k, v in _step_values(output).items() if v is not None})
            samples.append(sample)
            if not checks.add(sample):
                reason = "nonfinite"
                break
    finally:
        stop_watch.set()
        watchdog.join(timeout=2)
        if main:
            signal.signal(signal.SIGUSR1, previous)
    return SoakResult(
        samples=samples,
        limits=limits,
        stop_reason=reason,
        hang=hang or None,
        oom=oom,
        nonfinite=checks.nonfinite,
        spikes=checks.spikes,
    )


_OOM_WORDS = ("OutOfMemoryError", "out of memory", "MemoryError", "CUDA error: out of memory")


def run_command(
    command: Sequence[str],
    workdir: Path,
    *,
    steps: int | None = None,
    duration_s: float | None = None,
    limits: SoakLimits | None = None,
    echo: Callable[[str, str], None] | None = None,
) -> SoakResult:
    """Soak a command that marks its steps with `accelport.verify.perf.bench.step(loss=...)`.

    Until the first marked step, any line of output counts as a heartbeat (imports,
    data loading); after it, only steps do. A hang is ended with SIGABRT, which
    makes Python (PYTHONFAULTHANDLER=1) print every thread's stack.
    """
    command = bench.check_command(command)
    _check_length(steps, duration_s)
    limits = limits or SoakLimits()
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / "soak-steps.jsonl"
    log_path.unlink(missing_ok=True)
    control: dict[str, Any] = {}
    if steps is not None:
        control["max_steps"] = steps
    if duration_s is not None:
        control["deadline"] = time.time() + duration_s
    env = dict(os.environ, PYTHONFAULTHANDLER="1", PYTHONUNBUFFERED="1")
    env[bench.ENV_LOG] = str(log_path)
    env[bench.ENV_CONTROL] = json.dumps(control)
    try:
        proc = subprocess.Popen(
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
            start_new_session=True,
        )
    except OSError as exc:
        raise UserError(f"{command[0]}: cannot start ({exc.strerror}); check the command after --") from None
    tails = {"stdout": collections.deque(maxlen=400), "stderr": collections.deque(maxlen=400)}
    last_output = [time.monotonic()]

    def pump(stream, name: str) -> None:
        for line in stream:
            tails[name].append(line.rstrip("\n"))
            last_output[0] = time.monotonic()
            if echo is not None:
                echo(name, line)

    readers = [threading.Thread(target=pump, args=(proc.stdout, "stdout"), daemon=True),
               threading.Thread(target=pump, args=(proc.stderr, "stderr"), daemon=True)]
    for reader in readers:
        reader.start()
    checks = _Checks(limits)
    samples = Samples(limits.warmup_steps, limits.max_samples)
    offset = 0
    last_step = None
    reason = "process-ended"
    hang = None
    started = time.monotonic()
    done_at = None
    try:
        while True:
            finished = proc.poll() is not None
            records, offset = bench.read_step_log(log_path, offset)
            for record in records:
                samples.append(record)
                last_step = time.monotonic()
                if not checks.add(record):
                    reason = "nonfinite"
            if reason == "nonfinite" or finished:
                break
            if done_at is None and ((steps is not None and len(samples) >= steps)
                                    or (duration_s is not None and time.monotonic() - started >= duration_s)):
                done_at = time.monotonic()
                reason = "steps" if steps is not None and len(samples) >= steps else "duration"
            if done_at is not None and time.monotonic() - done_at > 10.0:
                break  # the script ignores step()'s False: end it, the soak itself is over
            beat = last_step if last_step is not None else max(last_output[0], started)
            if done_at is None and time.monotonic() - beat > limits.hang_timeout_s:
                hang = {"waited_s": time.monotonic() - beat, "last_step": len(samples) - 1}
                reason = "hang"
                break
            time.sleep(0.1)
    finally:
        if hang is not None and proc.poll() is None:
            marker = len(tails["stderr"])
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGABRT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
            for reader in readers:
                reader.join(timeout=2)
            hang["stacks"] = "\n".join(list(tails["stderr"])[max(0, marker - len(tails["stderr"])) :][-200:])
        bench.stop_process(proc)
        for reader in readers:
            reader.join(timeout=2)
    records, offset = bench.read_step_log(log_path, offset)
    for record in records:
        samples.append(record)
        checks.add(record)
    oom = crash = None
    code = proc.returncode
    stopped_by_us = reason in ("steps", "duration", "nonfinite", "hang")
    if code not in (0, None) and not stopped_by_us:
        text = "\n".join(tails["stderr"])
        if any(word in text for word in _OOM_WORDS):
            line = next((ln for ln in reversed(tails["stderr"]) if any(w in ln for w in _OOM_WORDS)), "")
            oom = {"step": len(samples), "message": line.strip()[:300], "snapshot": None}
            reason = "oom"
        elif code == -signal.SIGKILL:
            oom = {"step": len(samples), "message": "killed by SIGKILL (the kernel's OOM killer?)", "snapshot": None}
            reason = "oom"
        else:
            crash = {"exit_code": code, "stderr_tail": "\n".join(list(tails["stderr"])[-40:])}
            reason = "crash"
    if reason == "process-ended" and steps is not None and len(samples) >= steps:
        reason = "steps"
    return SoakResult(
        samples=samples,
        limits=limits,
        stop_reason=reason,
        hang=hang,
        oom=oom,
        crash=crash,
        nonfinite=checks.nonfinite,
        spikes=checks.spikes,
        command=list(command),
    )


_SAVED_FIELDS = {"verdict": "str", "failures": "strs", "stop_reason": "str", "steps": "int", "duration_s": "number",
                 "step_time_median_s": "number?", "slopes": "dict", "samples": "list", "hang": "dict?"}
_SAVED_SLOPE = {"per_step": "number", "low": "number", "high": "number"}
_SAVED_SAMPLE_OPTIONAL = {"dt": "number?", **{key: "number?" for key in MEMORY_SERIES}}


def load_result(path: str | Path) -> dict[str, Any]:
    """A result saved by `accelport soak --save`, checked field by field (UserError naming the file and key)."""
    data = read_saved(path, "soak", RESULT_KIND)
    if data.get("verdict") not in ("pass", "fail"):
        raise UserError(f"{path}: soak result without a verdict; {saved_by('soak')}")
    check_fields(data, _SAVED_FIELDS, path, "soak")
    for key, fit in data["slopes"].items():
        if not isinstance(fit, dict):
            raise UserError(f"{path}: soak result: 'slopes.{key}' must be an object; {rerun('soak')}")
        check_fields(fit, _SAVED_SLOPE, path, "soak", where=f"slopes.{key}.")
        check_fields(fit, {"relative": "number?"}, path, "soak", where=f"slopes.{key}.", optional=True)
    for index, sample in enumerate(data["samples"]):
        if not isinstance(sample, dict):
            raise UserError(f"{path}: soak result: 'samples[{index}]' must be an object; {rerun('soak')}")
        check_fields(sample, {"step": "number"}, path, "soak", where=f"samples[{index}].")
        check_fields(sample, _SAVED_SAMPLE_OPTIONAL, path, "soak", where=f"samples[{index}].", optional=True)
    if data["hang"] is not None:
        check_fields(data["hang"], {"stacks": "str"}, path, "soak", where="hang.", optional=True)
    return data


def parse_duration(text: str) -> float:
    """'90', '90s', '30m', '72h', '1d' -> seconds."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    value = text.strip().lower()
    scale = 1
    if value and value[-1] in units:
        scale = units[value[-1]]
        value = value[:-1]
    try:
        seconds = float(value) * scale
    except ValueError:
        raise UserError(f"duration {text!r}: use seconds or a unit, e.g. 90s, 30m, 72h") from None
    if seconds <= 0:
        raise UserError(f"duration {text!r} must be positive")
    return seconds
