"""Benchmarks: an operator's achieved TFLOP/s or GB/s and fraction of the device's peak, beside PyTorch's own op.

Both run in the same process on the same inputs. On an accelerator the timed
implementation is the one dispatch selects (the Triton kernel, or a vendor
override); on CPU it is the PyTorch reference, since Triton kernels run there
only under the interpreter, whose speed means nothing; the result says so.
Compute-bound operators (GEMM, attention) are judged in TFLOP/s against the
dtype's peak, memory-bound ones in GB/s against the memory bandwidth; a device
without a known peak gets no fraction rather than a guess.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from accelport.errors import InvalidValue
from accelport.kernels import configs, hardware
from accelport.kernels.registry import Case, Operator

CPU_NOTE = "CPU: timed the PyTorch reference path (Triton kernels need an accelerator to be timed)"


def _figure(value: float) -> float:
    """Four significant digits: a slow CPU run's 3e-05 TFLOP/s must not print as 0."""
    return float(f"{value:.4g}")


@dataclass(frozen=True)
class BenchResult:
    op: str
    case: str
    dtype: str
    device: str
    implementation: str
    bound: str  # "compute" or "memory"
    unit: str  # "TFLOP/s" or "GB/s"
    ms: float
    achieved: float
    peak: float | None
    fraction: float | None
    torch_ms: float
    torch_achieved: float
    torch_fraction: float | None
    note: str = ""
    large: bool = False  # a case of the operator's benchmark matrix: the "large shapes" the targets speak of

    @property
    def speedup(self) -> float:
        """PyTorch's time over ours: above 1 means the accelport implementation is faster."""
        return self.torch_ms / self.ms if self.ms else float("inf")

    def to_dict(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "case": self.case,
            "dtype": self.dtype,
            "device": self.device,
            "implementation": self.implementation,
            "bound": self.bound,
            "unit": self.unit,
            "ms": _figure(self.ms),
            "achieved": _figure(self.achieved),
            "peak": self.peak,
            "fraction_of_peak": None if self.fraction is None else _figure(self.fraction),
            "torch_ms": _figure(self.torch_ms),
            "torch_achieved": _figure(self.torch_achieved),
            "torch_fraction_of_peak": None if self.torch_fraction is None else _figure(self.torch_fraction),
            "speedup_vs_torch": round(self.speedup, 3),
            "note": self.note,
            "large_shape": self.large,
        }


def time_ms(fn: Callable[[], Any], device: Any, min_reps: int = 5, budget_s: float = 0.5) -> float:
    """Median milliseconds of `fn()` after a warm-up, on `device`'s own clock where it has one."""
    import torch

    device = torch.device(device)
    fn()  # warm-up: compilation, autotuning caches, allocator
    if device.type == "cpu":
        samples = []
        deadline = time.perf_counter() + budget_s
        while len(samples) < min_reps or (time.perf_counter() < deadline and len(samples) < 100):
            started = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - started) * 1e3)
        return statistics.median(samples)
    # Accelerator: events on the device's stream; a 256 MB write between runs evicts the L2 cache.
    flush = torch.empty(256 * 1024 * 1024, dtype=torch.int8, device=device)
    torch.accelerator.synchronize()
    samples = []
    deadline = time.perf_counter() + budget_s
    while len(samples) < min_reps or (time.perf_counter() < deadline and len(samples) < 100):
        flush.zero_()
        start, end = torch.Event(enable_timing=True), torch.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end))
    return statistics.median(samples)


def _rate(cost: Any, ms: float) -> float:
    seconds = ms / 1e3
    return cost.flops / seconds / 1e12 if cost.bound == "compute" else cost.bytes / seconds / 1e9


def _peak(hw: hardware.HardwareProfile | None, cost: Any, dtype: str) -> float | None:
    if hw is None:
        return None
    return hw.peak(dtype) if cost.bound == "compute" else hw.bandwidth_gbs


def bench_case(op: Operator, case: Case, dtype: str, device: Any, seed: int = 0) -> BenchResult:
    """Time one case: the implementation dispatch selects, then PyTorch's op, on the same inputs."""
    import torch

    device = torch.device(device)
    generator = torch.Generator().manual_seed(seed)
    inputs = op.make_inputs(case, getattr(torch, dtype), device, generator)
    implementation, _forced = op.select(device.type)
    with torch.no_grad():
        ms = time_ms(lambda: op(*inputs.args, **inputs.kwargs), device)
        baseline = op.torch_inputs(inputs) if op.torch_inputs is not None else inputs  # outside the timed call
        torch_ms = time_ms(lambda: op.torch_op(*baseline.args, **baseline.kwargs), device)
    cost = op.cost(case, dtype)
    hw = hardware.detect(device)
    peak = _peak(hw, cost, dtype)
    achieved, torch_achieved = _rate(cost, ms), _rate(cost, torch_ms)
    note = CPU_NOTE if device.type == "cpu" else ""
    if device.type != "cpu" and peak is None:
        note = f"no peak known for {hardware.device_name(device)}: add it to knowledge/kernels/hardware.toml"
    return BenchResult(
        op=op.name,
        case=case.label,
        dtype=dtype,
        device=hardware.device_name(device),
        implementation=implementation,
        bound=cost.bound,
        unit="TFLOP/s" if cost.bound == "compute" else "GB/s",
        ms=ms,
        achieved=achieved,
        peak=peak,
        fraction=achieved / peak if peak else None,
        torch_ms=torch_ms,
        torch_achieved=torch_achieved,
        torch_fraction=torch_achieved / peak if peak else None,
        note=note,
        large=case in op.bench_cases,
    )


def cases_for(op: Operator, which: str) -> tuple[Case, ...]:
    """The matrix named `which`: 'small' (the interpreter's), 'device' or 'bench'."""
    return {"small": op.cases, "device": op.device_cases, "bench": op.bench_cases}[which]


def run(ops: Sequence[Operator], device: Any, dtypes: Sequence[str] | None = None, which: str | None = None) -> list[BenchResult]:
    """Benchmark `ops` on `device`; CPU defaults to the small matrix, an accelerator to the bench matrix."""
    import torch

    configs.check_tuned_tables()
    device = torch.device(device)
    which = which or ("small" if device.type == "cpu" else "bench")
    results = []
    for op in ops:
        for case in cases_for(op, which):
            for dtype in dtypes or op.dtypes:
                if dtype in op.dtypes:
                    results.append(bench_case(op, case, dtype, device))
    return results


def check_device(device: Any) -> None:
    """Raise a UserError when `device` is not usable here."""
    import torch

    try:
        device = torch.device(device)
    except (RuntimeError, TypeError):
        raise InvalidValue(
            "device", device, "not a device type torch knows here; write e.g. cpu, cuda or cuda:0 "
            "(a vendor type such as npu needs the vendor's torch adapter installed)"
        ) from None
    if device.type in ("cpu", "meta"):
        return
    module = getattr(torch, device.type, None)
    if module is None or not hasattr(module, "is_available") or not module.is_available():
        raise InvalidValue(
            "device", device, f"no {device.type} device on this machine; use cpu to run here "
            "(Triton kernels then run under the interpreter, TRITON_INTERPRET=1), or run on a machine that has one"
        )
    count = module.device_count() if hasattr(module, "device_count") else None
    if device.index is not None and count is not None and device.index >= count:
        raise InvalidValue(
            "device", device, f"this machine has {count} {device.type} device(s), numbered from 0; choose one of them"
        )


# The GPU acceptance targets of the operator library (issue 8): (operator, what is measured, threshold).
# "peak" is the fraction of the dtype's peak (compute-bound ops) or of memory bandwidth (memory-bound ops);
# "torch" is PyTorch's time over ours on the same device and inputs.
TARGETS: tuple[tuple[str, str, float], ...] = (
    ("gemm", "peak", 0.70),
    ("gemm", "torch", 0.90),
    ("flash_attention", "peak", 0.45),
    ("softmax", "peak", 0.80),
    ("rms_norm", "peak", 0.80),
    ("layer_norm", "peak", 0.80),
    ("rope", "peak", 0.80),
    ("swiglu", "peak", 0.80),
)


@dataclass(frozen=True)
class TargetCheck:
    op: str
    measure: str
    threshold: float
    value: float | None  # the worst large-shape case of the op; None when nothing could be measured against it
    passed: bool | None  # None: not measurable here (CPU, unknown peak, no large-shape row)
    case: str = ""  # the case `value` comes from
    detail: str = ""  # why a target is not measurable

    def to_dict(self) -> dict[str, Any]:
        return {
            "op": self.op, "measure": self.measure, "threshold": self.threshold, "value": self.value,
            "passed": self.passed, "case": self.case, "detail": self.detail,
        }  # fmt: skip


def check_targets(results: Sequence[BenchResult | Mapping[str, Any]]) -> list[TargetCheck]:
    """Judge benchmark rows (BenchResults, or their dicts as in a bench JSON file) against TARGETS.

    The targets are for large shapes, so only rows of an operator's benchmark
    matrix count (`large_shape`), and every one of them must meet the threshold:
    the worst such row is the value. A small case that happens to run fast cannot
    meet a target, and a large one that misses it cannot hide behind another.
    """
    rows = [r.to_dict() if isinstance(r, BenchResult) else r for r in results]
    checks = []
    for op, measure, threshold in TARGETS:
        mine = [r for r in rows if r["op"] == op]
        measured = [r for r in mine if r.get("note") != CPU_NOTE]
        large = [r for r in measured if r.get("large_shape")]
        key = "fraction_of_peak" if measure == "peak" else "speedup_vs_torch"
        values = [(r[key], r["case"]) for r in large if r.get(key) is not None]
        if not values:
            if not mine:
                why = "not benchmarked"
            elif not measured:
                why = "CPU rows time the reference, not a kernel on a GPU"
            elif not large:
                why = "no large-shape row: run the bench matrix (--cases bench)"
            else:
                why = "no peak known for this device"
            checks.append(TargetCheck(op, measure, threshold, None, None, detail=why))
            continue
        value, case = min(values)
        checks.append(TargetCheck(op, measure, threshold, round(value, 4), value >= threshold, case))
    return checks
