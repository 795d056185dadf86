"""Validation: every implementation of an operator against its PyTorch reference, over its test matrix.

For each case and dtype the inputs are drawn from a seeded generator; the
reference runs in fp32 on the same (rounded) inputs, so what remains is the
implementation's own error. Outputs and, for differentiable operators, input
gradients must satisfy |out - ref| <= atol + rtol * |ref| elementwise, with
per-dtype tolerances; any NaN or Inf where the reference is finite fails.
`atol` is relative to the largest reference magnitude in the tensor, so a
gradient of size 1e-4 is held to the same relative standard as an output of size 10.
Uninitialised memory is filled with NaN while an implementation runs (torch's
deterministic mode), so an element a kernel forgets to write cannot pass by luck.

On CPU the Triton implementations run under the interpreter with the small
`cases` matrix; on a device they run natively over `cases` and `device_cases`.
"""

from __future__ import annotations

import contextlib
import os
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from accelport.kernels import configs, registry
from accelport.kernels.registry import REFERENCE, Case, Operator

DEFAULT_TOLERANCES: dict[str, tuple[float, float]] = {
    "float32": (1e-5, 1e-5),
    "float16": (1e-3, 2e-3),
    "bfloat16": (8e-3, 1.6e-2),
}


@dataclass(frozen=True)
class CheckResult:
    """One comparison: an output or a gradient of one implementation, case and dtype."""

    op: str
    implementation: str
    case: str
    dtype: str
    check: str  # "out" or "grad:<argument index>"
    passed: bool
    max_abs_err: float
    worst_ratio: float  # max |out - ref| / (atol max|ref| + rtol |ref|); <= 1 passes
    atol: float
    rtol: float
    seconds: float
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "implementation": self.implementation,
            "case": self.case,
            "dtype": self.dtype,
            "check": self.check,
            "passed": self.passed,
            "max_abs_err": self.max_abs_err,
            "worst_ratio": self.worst_ratio,
            "atol": self.atol,
            "rtol": self.rtol,
            "seconds": round(self.seconds, 4),
            "detail": self.detail,
        }


def compare(out: Any, ref: Any, atol: float, rtol: float) -> tuple[bool, float, float, str]:
    """(passed, max abs error, worst error/tolerance ratio, what went wrong) for one tensor pair."""
    import torch

    if not isinstance(out, torch.Tensor):
        return False, float("inf"), float("inf"), f"returned {type(out).__name__}, expected a tensor"
    if tuple(out.shape) != tuple(ref.shape):
        return False, float("inf"), float("inf"), f"shape {tuple(out.shape)} != reference {tuple(ref.shape)}"
    out64, ref64 = out.detach().double().cpu(), ref.detach().double().cpu()
    bad = (~torch.isfinite(out64)) & torch.isfinite(ref64)
    if bad.any():
        return False, float("inf"), float("inf"), f"{int(bad.sum())} non-finite values where the reference is finite"
    if out64.numel() == 0:
        return True, 0.0, 0.0, ""
    err = (out64 - ref64).abs().nan_to_num(0.0)
    magnitude = ref64.abs().nan_to_num(0.0, posinf=0.0)
    scale = float(magnitude.max()) or 1.0
    ratio = err / (atol * scale + rtol * magnitude)
    worst = float(ratio.max())
    detail = ""
    if worst > 1:
        index = tuple(int(i) for i in torch.unravel_index(ratio.argmax(), ratio.shape))
        detail = f"worst at {index}: got {float(out64[index]):.6g}, reference {float(ref64[index]):.6g}"
    return worst <= 1, float(err.max()), worst, detail


@contextlib.contextmanager
def _nan_filled_allocations() -> Iterator[None]:
    import torch

    was_on = torch.are_deterministic_algorithms_enabled()
    was_warn = torch.is_deterministic_algorithms_warn_only_enabled()
    was_fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(was_on, warn_only=was_warn)
        torch.utils.deterministic.fill_uninitialized_memory = was_fill


def _seed(op: str, case: str, dtype: str, seed: int) -> int:
    return seed + zlib.crc32(f"{op}/{case}/{dtype}".encode())


def _to_fp32(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.detach().float()
    return value


def _detached(value: Any, grad: bool) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().clone().requires_grad_(grad)
    return value


def _run(fn: Callable[..., Any], inputs: Any, grad_idx: Sequence[int], seed: int, dtype: str, upcast: bool):
    """Call `fn` (on fp32 copies of the inputs if `upcast`), then backpropagate a seeded gradient.

    The gradient is drawn in fp32 and rounded to `dtype` for both sides, so the
    reference and the implementation see the same values.
    """
    import torch

    convert = _to_fp32 if upcast else (lambda v: v)
    args = [convert(a) for a in inputs.args]
    kwargs = {k: convert(v) for k, v in inputs.kwargs.items()}
    leaves = [_detached(a, i in grad_idx) for i, a in enumerate(args)]
    outs = outputs(fn(*leaves, **kwargs))
    grads: list[Any] = []
    if grad_idx:
        seeds = [torch.randn(o.shape, generator=torch.Generator().manual_seed(seed + 1 + i), dtype=torch.float32) for i, o in enumerate(outs)]
        torch.autograd.backward(outs, [g.to(getattr(torch, dtype)).to(device=o.device, dtype=o.dtype) for g, o in zip(seeds, outs, strict=True)])
        grads = [leaves[i].grad for i in grad_idx]
    return tuple(o.detach() for o in outs), grads


def outputs(out: Any) -> tuple[Any, ...]:
    """An operator's result as a tuple: most return one tensor, fused ones (add + RMSNorm) several."""
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def output_checks(n: int) -> list[str]:
    """Check names of an operator's outputs: `out` for one, `out:0`, `out:1`, ... for several."""
    return ["out"] if n == 1 else [f"out:{i}" for i in range(n)]


def check_case(
    op: Operator, case: Case, dtype: str, implementation: str, fn: Callable[..., Any], device: Any, seed: int = 0
) -> list[CheckResult]:
    """Run one implementation on one case and dtype; compare output and gradients with the reference."""
    import torch

    atol, rtol = {**DEFAULT_TOLERANCES, **op.tolerances}.get(dtype, DEFAULT_TOLERANCES["float32"])
    case_seed = _seed(op.name, case.label, dtype, seed)
    generator = torch.Generator().manual_seed(case_seed)
    inputs = op.make_inputs(case, getattr(torch, dtype), device, generator)
    grad_idx = inputs.grad if op.backward else ()
    ref_out, ref_grads = _run(op.reference, inputs, grad_idx, case_seed, dtype, upcast=True)
    pins = {name: configs.Config.from_dict(values) for name, values in case.config.items()}
    started = time.perf_counter()
    try:
        with configs.pinned(pins), _nan_filled_allocations():
            out, grads = _run(fn, inputs, grad_idx, case_seed, dtype, upcast=False)
    except registry.KernelError:
        raise
    except Exception as exc:  # a kernel that crashes fails its case; the message says how
        seconds = time.perf_counter() - started
        message = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        return [CheckResult(op.name, implementation, case.label, dtype, "run", False, float("inf"), float("inf"), atol, rtol, seconds, message)]
    seconds = time.perf_counter() - started
    results = []
    if len(out) != len(ref_out):
        return [CheckResult(op.name, implementation, case.label, dtype, "out", False, float("inf"), float("inf"), atol, rtol, seconds, f"{len(out)} outputs, reference {len(ref_out)}")]
    checks = [
        *zip(output_checks(len(out)), out, ref_out, strict=True),
        *((f"grad:{i}", g, r) for i, g, r in zip(grad_idx, grads, ref_grads, strict=True)),
    ]
    for name, got, want in checks:
        if got is None:
            results.append(CheckResult(op.name, implementation, case.label, dtype, name, False, float("inf"), float("inf"), atol, rtol, seconds, "no gradient"))
            continue
        passed, max_abs, worst, detail = compare(got, want, atol, rtol)
        results.append(CheckResult(op.name, implementation, case.label, dtype, name, passed, max_abs, worst, atol, rtol, seconds, detail))
    return results


def implementations_for(op: Operator, device_type: str) -> list[str]:
    """What `validate` checks by default: every non-reference implementation that can run on this device type.

    Under the interpreter every Triton implementation runs on CPU, vendor overrides included.
    When ACCELPORT_KERNEL_IMPL forces an implementation for `op`, that one alone:
    validation checks what dispatch would run.
    """
    forced = registry.forced_implementation(op.name)
    if forced is not None:
        return [forced]
    if device_type == "cpu":
        return [name for name in op.implementations if name != REFERENCE]
    vendor = registry.vendor_key(device_type)
    return [registry.TRITON, *([f"{registry.TRITON}-{vendor}"] if vendor in op.overrides else [])]


def validate(
    op: Operator,
    *,
    device: Any = "cpu",
    dtypes: Sequence[str] | None = None,
    implementations: Sequence[str] | None = None,
    fn: Callable[..., Any] | None = None,
    cases: Sequence[Case] | None = None,
    stop_on_failure: bool = False,
    seed: int = 0,
) -> list[CheckResult]:
    """Check implementations of `op` against its reference; `fn` checks one callable instead (a planted fault)."""
    import torch

    configs.check_tuned_tables()  # a bad ACCELPORT_KERNEL_TUNED file is bad input, not a failed case
    device = torch.device(device)
    if cases is None:
        cases = op.cases if device.type == "cpu" else (*op.cases, *op.device_cases)
    if fn is not None:
        named: list[tuple[str, Callable[..., Any]]] = [("candidate", fn)]
    else:
        names = implementations or implementations_for(op, device.type)
        from_env = not implementations and registry.forced_implementation(op.name) is not None
        named = []
        for name in names:
            try:
                impl = op.implementation(name)
                if name != REFERENCE:
                    registry.check_runnable(op.name, name, device.type)
            except registry.KernelError as exc:
                if not from_env:
                    raise
                raise registry.KernelError(f"{registry.ENV_VAR}={os.environ.get(registry.ENV_VAR, '')}: {exc}") from None
            named.append((name, impl))
    results: list[CheckResult] = []
    for name, impl in named:
        for case in cases:
            for dtype in dtypes or op.dtypes:
                if dtype not in op.dtypes:
                    continue
                results.extend(check_case(op, case, dtype, name, impl, device, seed))
                if stop_on_failure and not all(r.passed for r in results):
                    return results
    return results


@dataclass(frozen=True)
class ValidationReport:
    """What `accelport kernels test` prints: every comparison, the lint findings, the device and mode."""

    device: str
    interpreter: bool
    results: tuple[CheckResult, ...]
    lint: tuple[Any, ...]

    @property
    def passed(self) -> bool:
        return bool(self.results) and all(r.passed for r in self.results) and not self.lint

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "interpreter": self.interpreter,
            "passed": self.passed,
            "checks": len(self.results),
            "failed": sum(not r.passed for r in self.results),
            "lint": [f.to_dict() for f in self.lint],
            "results": [r.to_dict() for r in self.results],
        }


def run(
    names: Sequence[str] | None,
    device: Any,
    dtypes: Sequence[str] | None = None,
    implementations: Sequence[str] | None = None,
    lint: bool = True,
) -> ValidationReport:
    """Lint the operator modules, then validate each named operator (all by default) on `device`."""
    import torch

    from accelport.kernels import lint as kernel_lint
    from accelport.kernels import tl_compat

    device = torch.device(device)
    results: list[CheckResult] = []
    for op in registry.operators(names):
        results.extend(validate(op, device=device, dtypes=dtypes, implementations=implementations))
    findings = tuple(kernel_lint.lint_package()) if lint else ()
    return ValidationReport(str(device), device.type == "cpu" and tl_compat.INTERPRETING, tuple(results), findings)
