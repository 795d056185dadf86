"""Drop-in, ATen style: `enable()` runs accelport's kernels under PyTorch's own operators for one device.

    from accelport import kernels
    with kernels.enable(device="cuda") as takeover:   # or enable(...) ... disable()
        loss = model(x).sum(); loss.backward()
    print(takeover.report())                            # which ATen ops were taken over, calls, fallbacks

Through `torch.library` (as FlagGems' `enable()`), each operator group overrides
ATen operators for the device's dispatch key (CPU, CUDA, XPU, or PrivateUse1 for
npu/musa/mlu, whose adapters register there):

| group | ATen operators | level | backward |
|---|---|---|---|
| softmax | `_softmax`, `_softmax_backward_data` | backend key | ATen's formula, our backward kernel |
| log_softmax | `_log_softmax`, `_log_softmax_backward_data` | backend key | ATen's formula, our backward kernel |
| layer_norm | `native_layer_norm`, `native_layer_norm_backward` | backend key | ATen's formula, our backward kernel |
| gemm | `mm`, `addmm`, `bmm` | backend key | ATen's formula (mm on transposed views: our kernel) |
| rms_norm | `rms_norm` | Autograd<key> | our autograd.Function and backward kernel |
| flash_attention | `scaled_dot_product_attention` | Autograd<key> | our autograd.Function and backward kernels |
| cross_entropy | `cross_entropy_loss` | Autograd<key> | our autograd.Function and backward kernel |

`rms_norm`, SDPA and `cross_entropy_loss` are composite operators (they decompose
before reaching a backend key on CPU), so they are overridden one level up, where
they still arrive whole. A call the kernels do not cover (another dtype, an
attention mask, dropout, probability targets, a normalized shape of more
than one dimension for rms_norm) goes to the original kernel, fetched with
`torch.library.get_kernel` before overriding, and is counted as a fallback with its
reason. Calls that the kernels' own host code makes go to the originals too.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import logging
import math
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from accelport.kernels import registry
from accelport.kernels.registry import KernelError

log = logging.getLogger(__name__)

# accelport operator -> (ATen operator, level) it takes over
GROUPS: dict[str, tuple[tuple[str, str], ...]] = {
    "softmax": (("_softmax", "backend"), ("_softmax_backward_data", "backend")),
    "log_softmax": (("_log_softmax", "backend"), ("_log_softmax_backward_data", "backend")),
    "layer_norm": (("native_layer_norm", "backend"), ("native_layer_norm_backward", "backend")),
    "gemm": (("mm", "backend"), ("addmm", "backend"), ("bmm", "backend")),
    "rms_norm": (("rms_norm", "autograd"),),
    "flash_attention": (("scaled_dot_product_attention", "autograd"),),
    "cross_entropy": (("cross_entropy_loss", "autograd"),),
}
FLOAT_DTYPES = ("float32", "float16", "bfloat16")
_REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}

_bypass: contextvars.ContextVar[bool] = contextvars.ContextVar("accelport_aten_bypass", default=False)


@contextlib.contextmanager
def bypassing() -> Iterator[None]:
    """Inside the block, overridden ATen operators run their original kernels (the kernels' own host code)."""
    token = _bypass.set(True)
    try:
        yield
    finally:
        _bypass.reset(token)


def dispatch_key(device_type: str) -> str:
    """The backend dispatch key of a torch device type; out-of-tree backends (npu, musa, mlu) use PrivateUse1."""
    return {"cpu": "CPU", "cuda": "CUDA", "xpu": "XPU", "mps": "MPS"}.get(device_type, "PrivateUse1")


@dataclass
class Takeover:
    """One ATen operator taken over: where, by which implementation, and what happened to its calls."""

    group: str
    aten: str
    key: str
    implementation: str
    calls: int = 0
    fallbacks: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "group": self.group, "aten": self.aten, "key": self.key, "implementation": self.implementation,
            "calls": self.calls, "fallbacks": dict(self.fallbacks),
        }  # fmt: skip


class Fallback(Exception):
    """Raised by an override before it computes anything: this call goes to the original kernel, for `reason`."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Enabled:
    """The handle `enable()` returns: the takeover log, `disable()`, and a context manager that disables on exit."""

    def __init__(self, device_type: str, takeovers: list[Takeover], library: Any) -> None:
        self.device_type = device_type
        self.takeovers = takeovers
        self._library = library

    @property
    def active(self) -> bool:
        return self._library is not None

    def disable(self) -> None:
        global _active
        if self._library is not None:
            self._library._destroy()
            self._library = None
            log.info("accelport kernels: ATen overrides for %s removed", self.device_type)
        if _active is self:
            _active = None

    def __enter__(self) -> Enabled:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.disable()

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device_type, "active": self.active, "takeovers": [t.to_dict() for t in self.takeovers]}

    def report(self) -> str:
        lines = [f"accelport kernels on {self.device_type} ({'active' if self.active else 'disabled'}):"]
        for t in self.takeovers:
            falls = ", ".join(f"{n} x {why}" for why, n in sorted(t.fallbacks.items())) or "none"
            lines.append(f"  {t.aten} [{t.key}] <- {t.group} ({t.implementation}): {t.calls} calls, fallbacks: {falls}")
        return "\n".join(lines)


_active: Enabled | None = None


def implementation(op: registry.Operator, device_type: str) -> tuple[str, Callable[..., Any]]:
    """The implementation drop-in integration runs for `op` on `device_type`: Triton (vendor override if any).

    On CPU that is the Triton kernel under the interpreter (the registry would pick the
    reference there, which would make the integration a no-op); a process that is not
    interpreting gets a KernelError saying how to fix it.
    """
    name = registry.TRITON if device_type in ("cpu", "meta") else op.select(device_type)[0]
    if name == registry.REFERENCE:
        return name, op.reference
    fn = op.implementation(name)
    registry.check_runnable(op.name, name, device_type)
    return name, fn


def active() -> Enabled | None:
    return _active


def enable(ops: Sequence[str] | None = None, device: Any = None) -> Enabled:
    """Override the ATen operators of `ops` (default: every group of GROUPS) for `device`'s dispatch key.

    `device` defaults to the current accelerator, else cpu (which needs TRITON_INTERPRET=1).
    Enabling again replaces the previous overrides. Returns the handle with the log.
    """
    import torch

    if device is None:
        accelerator = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
        device = accelerator.type if accelerator is not None else "cpu"
    device_type = torch.device(device).type
    groups = list(ops) if ops is not None else list(GROUPS)
    unknown = [g for g in groups if g not in GROUPS]
    if unknown:
        raise KernelError(f"enable: no ATen takeover for {', '.join(unknown)}; choose from {', '.join(GROUPS)}")
    if _active is not None:
        _active.disable()
    key = dispatch_key(device_type)
    library = torch.library.Library("aten", "IMPL")
    takeovers: list[Takeover] = []
    try:
        for group in groups:
            impl_name, _ = implementation(registry.get(group), device_type)
            for aten_name, level in GROUPS[group]:
                at_key = key if level == "backend" else f"Autograd{key}"
                record = Takeover(group, f"aten::{aten_name}", at_key, impl_name)
                original = torch.library.get_kernel(f"aten::{aten_name}", at_key)
                body = _BODIES[aten_name](device_type)
                with warnings.catch_warnings():
                    warnings.filterwarnings("ignore", message="(?s).*Overriding a previously registered kernel")
                    library.impl(aten_name, _wrap(record, original, body, device_type), at_key, with_keyset=True)
                takeovers.append(record)
    except BaseException:
        library._destroy()
        raise
    handle = Enabled(device_type, takeovers, library)
    globals()["_active"] = handle
    log.info("accelport kernels: %s", "; ".join(f"{t.aten} [{t.key}]" for t in takeovers))
    return handle


def disable() -> None:
    """Remove the overrides of the last `enable()` (nothing if none is active)."""
    if _active is not None:
        _active.disable()


def _wrap(record: Takeover, original: Any, body: Callable[..., Any], device_type: str) -> Callable[..., Any]:
    def override(keyset: Any, *args: Any, **kwargs: Any) -> Any:
        if _bypass.get():
            return original.call_boxed(keyset, *args, **kwargs)
        try:
            with bypassing():
                result = body(*args, **kwargs)
        except Fallback as why:
            record.fallbacks[why.reason] = record.fallbacks.get(why.reason, 0) + 1
            return original.call_boxed(keyset, *args, **kwargs)
        record.calls += 1
        return result

    return override


# --------------------------------------------------------------------------- the overrides


def _floats(*tensors: Any) -> None:
    for t in tensors:
        if t is not None and str(t.dtype).removeprefix("torch.") not in FLOAT_DTYPES:
            raise Fallback(f"dtype {str(t.dtype).removeprefix('torch.')}")
    dtypes = {t.dtype for t in tensors if t is not None}
    if len(dtypes) > 1:
        raise Fallback("mixed dtypes")


def _module(name: str) -> Any:
    return importlib.import_module(f"accelport.kernels.{name}")


def _softmax_launcher(device_type: str) -> Callable[..., Any]:
    op = registry.get("softmax")
    name, _ = implementation(op, device_type)
    return _module("softmax_npu").forward if name == f"{registry.TRITON}-npu" else _module("softmax").forward


def _softmax_body(device_type: str, log: bool = False) -> Callable[..., Any]:
    launcher = _module("softmax").forward if log else _softmax_launcher(device_type)

    def body(x: Any, dim: int, half_to_float: bool) -> Any:
        _floats(x)
        if half_to_float:
            x = x.float()
        if x.dim() == 0:
            raise Fallback("0-d input")
        moved = x.movedim(dim, -1)
        return (launcher(moved, log=True) if log else launcher(moved)).movedim(-1, dim).contiguous()

    return body


def _softmax_backward_body(device_type: str, log: bool = False) -> Callable[..., Any]:
    softmax = _module("softmax")

    def body(grad: Any, out: Any, dim: int, input_dtype: Any) -> Any:
        _floats(grad, out)
        if out.dim() == 0:
            raise Fallback("0-d input")
        dx = softmax.backward(out.movedim(dim, -1), grad.movedim(dim, -1), log=log)
        return dx.movedim(-1, dim).to(input_dtype).contiguous()

    return body


def _norm_rows(x: Any, normalized_shape: Sequence[int]) -> tuple[Any, int, int]:
    """x as (rows, prod(normalized_shape)), the leading dims' count, and the normalised width."""
    width = math.prod(normalized_shape)
    lead = x.dim() - len(normalized_shape)
    if lead < 0 or tuple(x.shape[lead:]) != tuple(normalized_shape):
        raise Fallback("normalized_shape does not end the input's shape")
    return x.reshape(math.prod(x.shape[:lead]), width), lead, width


def _layer_norm_body(device_type: str) -> Callable[..., Any]:
    layer_norm = _module("layer_norm")

    def body(x: Any, normalized_shape: Sequence[int], weight: Any, bias: Any, eps: float) -> Any:
        _floats(x, weight, bias)
        x2, lead, width = _norm_rows(x, normalized_shape)
        y, mean, rstd = layer_norm.forward(
            x2, None if weight is None else weight.reshape(width), None if bias is None else bias.reshape(width), eps
        )
        # ATen's CPU kernel keeps the statistics in the input dtype, the GPU kernels in fp32: keep the op's contract.
        stat_dtype = x.dtype if device_type == "cpu" else mean.dtype
        stat_shape = (*x.shape[:lead], *([1] * len(normalized_shape)))
        return y.view(x.shape), mean.to(stat_dtype).view(stat_shape), rstd.to(stat_dtype).view(stat_shape)

    return body


def _layer_norm_backward_body(device_type: str) -> Callable[..., Any]:
    layer_norm = _module("layer_norm")

    def body(dy: Any, x: Any, normalized_shape: Sequence[int], mean: Any, rstd: Any, weight: Any, bias: Any, mask: Sequence[bool]) -> Any:
        _floats(dy, x, weight, bias)
        x2, _, width = _norm_rows(x, normalized_shape)
        w = None if weight is None else weight.reshape(width)
        dx, dw, db = layer_norm.backward(
            x2, w, bias is not None, mean.reshape(-1).float(), rstd.reshape(-1).float(), dy.reshape(x2.shape)
        )
        return (
            dx.view(x.shape) if mask[0] else None,
            dw.to(weight.dtype).view(weight.shape) if mask[1] and dw is not None else None,
            db.to(bias.dtype).view(bias.shape) if mask[2] and db is not None else None,
        )

    return body


def _gemm_ready(a: Any, b: Any) -> None:
    _floats(a, b)
    if a.dtype != b.dtype:
        raise Fallback("mixed dtypes")


def _mm_body(device_type: str) -> Callable[..., Any]:
    gemm = _module("gemm")

    def body(a: Any, b: Any) -> Any:
        _gemm_ready(a, b)
        if a.dim() != 2 or b.dim() != 2:
            raise Fallback("not 2-d")
        return gemm.matmul(a, b)

    return body


def _addmm_body(device_type: str) -> Callable[..., Any]:
    gemm = _module("gemm")

    def body(bias: Any, a: Any, b: Any, *, beta: Any = 1, alpha: Any = 1) -> Any:
        _gemm_ready(a, b)
        _floats(bias, a)
        if a.dim() != 2 or b.dim() != 2:
            raise Fallback("not 2-d")
        out = gemm.matmul(a, b)
        if alpha != 1:
            out = out * alpha
        if beta == 0:  # as ATen: the input is ignored, NaN included
            return out
        return out + (bias if beta == 1 else bias * beta)

    return body


def _bmm_body(device_type: str) -> Callable[..., Any]:
    gemm = _module("gemm")

    def body(a: Any, b: Any) -> Any:
        _gemm_ready(a, b)
        if a.dim() != 3 or b.dim() != 3 or a.shape[0] != b.shape[0]:
            raise Fallback("not two 3-d batches of the same size")
        return gemm.batched_matmul(a, b)

    return body


def _rms_norm_body(device_type: str) -> Callable[..., Any]:
    import torch

    _, rms_norm = implementation(registry.get("rms_norm"), device_type)

    def body(x: Any, normalized_shape: Sequence[int], weight: Any = None, eps: float | None = None) -> Any:
        _floats(x, weight)
        if len(normalized_shape) != 1 or x.dim() == 0 or x.shape[-1] != normalized_shape[0]:
            raise Fallback("normalized_shape of more than the last dimension")
        eps = torch.finfo(x.dtype).eps if eps is None else eps
        return rms_norm(x, weight, eps)

    return body


def _sdpa_body(device_type: str) -> Callable[..., Any]:
    _, attention = implementation(registry.get("flash_attention"), device_type)

    def body(
        q: Any, k: Any, v: Any, attn_mask: Any = None, dropout_p: float = 0.0, is_causal: bool = False,
        scale: float | None = None, enable_gqa: bool = False,
    ) -> Any:  # fmt: skip
        _floats(q, k, v)
        if attn_mask is not None:
            raise Fallback("attn_mask")
        if dropout_p:
            raise Fallback("dropout")
        if q.dim() != 4 or k.dim() != 4 or v.shape != k.shape or q.shape[-1] != k.shape[-1]:
            raise Fallback("not (B, H, S, D) with k and v alike")
        if q.shape[1] != k.shape[1] and (not enable_gqa or q.shape[1] % k.shape[1]):
            raise Fallback("heads differ without enable_gqa")
        return attention(q, k, v, is_causal, scale)

    return body


def _cross_entropy_body(device_type: str) -> Callable[..., Any]:
    cross_entropy = _module("cross_entropy").cross_entropy

    def body(
        logits: Any, target: Any, weight: Any = None, reduction: int = 1, ignore_index: int = -100,
        label_smoothing: float = 0.0,
    ) -> Any:  # fmt: skip
        _floats(logits, weight)
        if target.is_floating_point():
            raise Fallback("class probabilities as target")
        if logits.dim() < 2:
            raise Fallback("unbatched logits")
        # (N, C, d1, ...) logits, class weights and label smoothing are the kernel's own
        return cross_entropy(
            logits, target, ignore_index, _REDUCTIONS[int(reduction)], weight=weight, label_smoothing=label_smoothing
        )

    return body


_BODIES: dict[str, Callable[[str], Callable[..., Any]]] = {
    "_softmax": _softmax_body,
    "_softmax_backward_data": _softmax_backward_body,
    "_log_softmax": lambda device_type: _softmax_body(device_type, log=True),
    "_log_softmax_backward_data": lambda device_type: _softmax_backward_body(device_type, log=True),
    "native_layer_norm": _layer_norm_body,
    "native_layer_norm_backward": _layer_norm_backward_body,
    "mm": _mm_body,
    "addmm": _addmm_body,
    "bmm": _bmm_body,
    "rms_norm": _rms_norm_body,
    "scaled_dot_product_attention": _sdpa_body,
    "cross_entropy_loss": _cross_entropy_body,
}
