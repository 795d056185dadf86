"""Cross-entropy over class logits (forward and backward), with ignore_index and mean/sum/none reduction.

One program per row streams the logits in BLOCK-wide tiles with an online
log-sum-exp (a 128k vocabulary never needs a full row in registers); the loss and
the log-sum-exp are kept per row. The backward writes (softmax - one_hot) times
the row's share of the incoming gradient, re-reading the logits once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from accelport.kernels import _rows, configs
from accelport.kernels.registry import Case, Cost, Inputs, KernelError, Operator
from accelport.kernels.tl_compat import launch, tl, triton

NAME = "cross_entropy"
REDUCTIONS = ("mean", "sum", "none")


def _soft_capped(logits: torch.Tensor, softcap: float | None) -> torch.Tensor:
    return logits if softcap is None else softcap * torch.tanh(logits / softcap)


def torch_op(
    logits: torch.Tensor, target: torch.Tensor, ignore_index: int = -100, reduction: str = "mean", *,
    weight: torch.Tensor | None = None, label_smoothing: float = 0.0, z_loss: float = 0.0, softcap: float | None = None,
) -> torch.Tensor:  # fmt: skip
    """What a PyTorch training loop computes: optional tanh soft-capping (Gemma 2), F.cross_entropy, plus the
    z-loss z * log-sum-exp^2 (PaLM) over the rows that are not ignored (mean: divided by their count)."""
    capped = _soft_capped(logits, softcap)
    loss = torch.nn.functional.cross_entropy(
        capped, target, weight=weight, ignore_index=ignore_index, reduction=reduction, label_smoothing=label_smoothing
    )
    if z_loss:
        keep = target != ignore_index
        z = z_loss * torch.logsumexp(capped, dim=1).pow(2) * keep
        if reduction == "none":
            loss = loss + z
        else:
            loss = loss + (z.sum() / keep.sum() if reduction == "mean" else z.sum())
    return loss


def reference(logits: torch.Tensor, target: torch.Tensor, ignore_index: int = -100, reduction: str = "mean", **options: Any) -> torch.Tensor:
    weight = options.pop("weight", None)
    loss = torch_op(logits.float(), target, ignore_index, reduction, weight=None if weight is None else weight.float(), **options)
    return loss.to(logits.dtype)


@triton.jit
def _capped(x, softcap, SOFTCAP: tl.constexpr):
    """softcap * tanh(x / softcap), tanh from the sigmoid (libdevice returns None under the interpreter)."""
    if SOFTCAP:
        z = tl.minimum(tl.maximum(2.0 * x / softcap, -40.0), 40.0)
        x = softcap * (2.0 * tl.sigmoid(z) - 1.0)
    return x


@triton.jit
def _cross_entropy_fwd(
    x_ptr, target_ptr, weight_ptr, loss_ptr, lse_ptr, n_cols, x_stride, ignore_index, smoothing, softcap, weight_sum,
    HAS_WEIGHT: tl.constexpr, SMOOTH: tl.constexpr, SOFTCAP: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    # loss = w[t] * (lse - x_t), with label smoothing (1 - e) * that + e / C * sum_j w_j * (lse - x_j), as torch
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * x_stride
    cols = tl.arange(0, BLOCK)
    m = tl.max(tl.full([BLOCK], -float("inf"), tl.float32), axis=0)
    s = tl.sum(tl.zeros([BLOCK], tl.float32), axis=0)
    weighted = tl.zeros([BLOCK], tl.float32)  # sum_j w_j x_j, for smoothing
    for start in range(0, n_cols, BLOCK):
        mask = start + cols < n_cols
        x = _capped(tl.load(x_row + start + cols, mask=mask, other=0.0).to(tl.float32), softcap, SOFTCAP)
        if SMOOTH:
            w = tl.load(weight_ptr + start + cols, mask=mask, other=0.0).to(tl.float32) if HAS_WEIGHT else 1.0
            weighted += tl.where(mask, w * x, 0.0)
        x = tl.where(mask, x, -float("inf"))
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    lse = m + tl.log(s)
    target = tl.load(target_ptr + row)
    keep = target != ignore_index
    safe = tl.where(keep, target, 0)
    x_target = _capped(tl.load(x_row + safe).to(tl.float32), softcap, SOFTCAP)
    w_target = tl.load(weight_ptr + safe).to(tl.float32) if HAS_WEIGHT else 1.0
    loss = w_target * (lse - x_target)
    if SMOOTH:
        loss = (1.0 - smoothing) * loss + smoothing / n_cols * (weight_sum * lse - tl.sum(weighted, axis=0))
    tl.store(lse_ptr + row, lse)
    tl.store(loss_ptr + row, tl.where(keep, loss, 0.0))


@triton.jit
def _cross_entropy_bwd(
    x_ptr, target_ptr, weight_ptr, lse_ptr, scale_ptr, z_scale_ptr, dx_ptr, n_cols, x_stride, dx_stride, scale_stride,
    ignore_index, smoothing, softcap, weight_sum,
    HAS_WEIGHT: tl.constexpr, SMOOTH: tl.constexpr, SOFTCAP: tl.constexpr, HAS_Z: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    # d x_j = scale * w_t * (p_j - one_hot_j) [smoothing: (1 - e) * that + e / C * (W p_j - w_j)] + z_scale * lse * p_j,
    # times the soft-cap's derivative 1 - tanh^2; zero for ignored rows
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    target = tl.load(target_ptr + row)
    keep = target != ignore_index
    scale = tl.where(keep, tl.load(scale_ptr + row * scale_stride).to(tl.float32), 0.0)
    w_target = tl.load(weight_ptr + tl.where(keep, target, 0)).to(tl.float32) if HAS_WEIGHT else 1.0
    lse = tl.load(lse_ptr + row)
    for start in range(0, n_cols, BLOCK):
        mask = start + cols < n_cols
        x = _capped(tl.load(x_ptr + row * x_stride + start + cols, mask=mask, other=0.0).to(tl.float32), softcap, SOFTCAP)
        p = tl.exp(x - lse)
        grad = w_target * (p - tl.where(start + cols == target, 1.0, 0.0))
        if SMOOTH:
            w = tl.load(weight_ptr + start + cols, mask=mask, other=0.0).to(tl.float32) if HAS_WEIGHT else 1.0
            grad = (1.0 - smoothing) * grad + smoothing / n_cols * (weight_sum * p - w)
        grad = grad * scale
        if HAS_Z:
            grad += tl.where(keep, tl.load(z_scale_ptr + row * scale_stride).to(tl.float32), 0.0) * lse * p
        if SOFTCAP:
            t = x / softcap
            grad = grad * (1.0 - t * t)
        tl.store(dx_ptr + row * dx_stride + start + cols, grad.to(dx_ptr.dtype.element_ty), mask=mask)


SPACE = configs.row_space(lambda p: p["cols"], buffers=2, max_block=8192)


def _config(x2d: torch.Tensor) -> configs.Config:
    return configs.choose(NAME, SPACE, _rows.problem_of(x2d), x2d.device)


class TargetOutOfRange(KernelError, IndexError):
    """A target class outside [0, classes) that is not ignore_index: an IndexError, as torch raises."""


def check_targets(target: torch.Tensor, n_classes: int, ignore_index: int) -> None:
    """Raise TargetOutOfRange like torch's "Target 10 is out of bounds." instead of reading another row.

    One reduction over the targets (a device-to-host sync on a GPU, as torch's own CPU check does).
    """
    if target.device.type == "meta" or not target.numel():  # meta: the AOT check plans launches, no values
        return
    bad = (target != ignore_index) & ((target < 0) | (target >= n_classes))
    if bool(bad.any()):
        raise TargetOutOfRange(f"Target {int(target[bad][0])} is out of bounds.")


@dataclass(frozen=True)
class Options:
    """What a cross-entropy launch computes beyond plain NLL."""

    weight: torch.Tensor | None = None  # (classes,) class weights
    label_smoothing: float = 0.0
    z_loss: float = 0.0
    softcap: float | None = None

    def constexprs(self) -> dict[str, bool]:
        return {"HAS_WEIGHT": self.weight is not None, "SMOOTH": bool(self.label_smoothing), "SOFTCAP": self.softcap is not None}

    def scalars(self, n_cols: int) -> tuple[float, float, float]:
        weight_sum = float(self.weight.float().sum()) if self.weight is not None and self.label_smoothing else float(n_cols)
        return float(self.label_smoothing), float(self.softcap or 1.0), weight_sum


def launch_forward(x2d: torch.Tensor, target: torch.Tensor, ignore_index: int, options: Options) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss per row, log-sum-exp per row) for logits (rows, classes); loss 0 where the target is ignored."""
    n_rows, n_cols = x2d.shape
    loss = torch.empty(n_rows, dtype=torch.float32, device=x2d.device)
    lse = torch.empty(n_rows, dtype=torch.float32, device=x2d.device)
    if n_rows:
        weight = options.weight if options.weight is not None else x2d
        launch(
            _cross_entropy_fwd, (n_rows,), x2d, target, weight, loss, lse, n_cols, x2d.stride(0), ignore_index,
            *options.scalars(n_cols), **options.constexprs(), **_config(x2d).launch_options(),
        )  # fmt: skip
    return loss, lse


def launch_backward(
    x2d: torch.Tensor, target: torch.Tensor, lse: torch.Tensor, scale: torch.Tensor, z_scale: torch.Tensor | None,
    dx: torch.Tensor, ignore_index: int, options: Options,
) -> None:  # fmt: skip
    """Write d logits into `dx` (may be `x2d` itself: each element is read, then written, by one program).

    `scale` and `z_scale` hold one value, or one per row (reduction none).
    """
    n_rows, n_cols = x2d.shape
    if not n_rows:
        return
    weight = options.weight if options.weight is not None else x2d
    launch(
        _cross_entropy_bwd, (n_rows,), x2d, target, weight, lse, scale, scale if z_scale is None else z_scale, dx, n_cols,
        x2d.stride(0), dx.stride(0), 0 if scale.numel() == 1 else 1, ignore_index, *options.scalars(n_cols),
        HAS_Z=z_scale is not None, **options.constexprs(), **_config(x2d).launch_options(),
    )  # fmt: skip


class _CrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, target: torch.Tensor, ignore_index: int, reduction: str, options: Options) -> torch.Tensor:
        if reduction not in REDUCTIONS:
            raise KernelError(f"cross_entropy: reduction {reduction!r} is not one of {', '.join(REDUCTIONS)}")
        if logits.dim() != 2 or target.shape != logits.shape[:1]:
            raise KernelError(f"cross_entropy: logits must be (N, classes) and target (N,), got {tuple(logits.shape)} and {tuple(target.shape)}")
        x2d = _rows.as_rows(logits)
        target = target.contiguous()
        n_cols = x2d.shape[1]
        if options.weight is not None and tuple(options.weight.shape) != (n_cols,):
            raise KernelError(f"cross_entropy: weight of shape {tuple(options.weight.shape)} does not fit {n_cols} classes")
        check_targets(target, n_cols, ignore_index)
        loss, lse = launch_forward(x2d, target, ignore_index, options)
        keep = target != ignore_index
        valid = keep.sum()
        # mean: torch divides by the summed weights of the rows kept (their count without weights)
        denominator = options.weight.float()[target.clamp_min(0)].mul(keep).sum() if options.weight is not None else valid.float()
        z = options.z_loss * lse.pow(2) * keep if options.z_loss else None
        ctx.save_for_backward(x2d, target, lse, valid, denominator)
        ctx.ignore_index, ctx.reduction, ctx.options = ignore_index, reduction, options
        if reduction == "none":
            return (loss if z is None else loss + z).to(logits.dtype)
        total = loss.sum() / denominator if reduction == "mean" else loss.sum()
        if z is not None:
            total = total + (z.sum() / valid if reduction == "mean" else z.sum())
        return total.to(logits.dtype)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        x2d, target, lse, valid, denominator = ctx.saved_tensors
        g = grad.float().reshape(-1).contiguous()
        scale = g / denominator if ctx.reduction == "mean" else g
        z_scale = None
        if ctx.options.z_loss:
            z_scale = (g / valid if ctx.reduction == "mean" else g) * (2.0 * ctx.options.z_loss)
        dx = torch.empty_like(x2d)
        launch_backward(x2d, target, lse, scale.contiguous(), z_scale, dx, ctx.ignore_index, ctx.options)
        return dx, None, None, None, None


def cross_entropy(
    logits: torch.Tensor, target: torch.Tensor, ignore_index: int = -100, reduction: str = "mean", *,
    weight: torch.Tensor | None = None, label_smoothing: float = 0.0, z_loss: float = 0.0, softcap: float | None = None,
) -> torch.Tensor:  # fmt: skip
    """The Triton implementation, differentiable in the logits.

    logits (N, C) or (N, C, d1, ...) with target (N,) or (N, d1, ...), as F.cross_entropy; class `weight`,
    `label_smoothing` as torch; `z_loss` adds z * lse^2 per kept row; `softcap` applies softcap * tanh(x / softcap).
    """
    if not 0.0 <= label_smoothing <= 1.0:
        raise KernelError(f"cross_entropy: label_smoothing {label_smoothing} must be in [0, 1]")
    if softcap is not None and softcap <= 0:
        raise KernelError(f"cross_entropy: softcap {softcap} must be positive")
    options = Options(weight, float(label_smoothing), float(z_loss), None if softcap is None else float(softcap))
    if logits.dim() > 2:  # (N, C, d1, ...): the classes are dimension 1
        classes = logits.shape[1]
        rows = logits.movedim(1, -1).reshape(-1, classes)
        loss = _CrossEntropy.apply(rows, target.reshape(-1), ignore_index, reduction, options)
        return loss.view(target.shape) if reduction == "none" else loss
    return _CrossEntropy.apply(logits, target, ignore_index, reduction, options)


def make_inputs(case: Case, dtype: torch.dtype, device: Any, generator: torch.Generator) -> Inputs:
    p = case.params
    rows, cols, extra = p["rows"], p["cols"], tuple(p.get("extra_dims", ()))
    logits = _rows.randn((rows, cols, *extra), dtype, device, generator, scale=3.0)
    if torch.device(device).type == "meta":
        target = torch.empty((rows, *extra), dtype=torch.int64, device="meta")
    else:
        target = torch.randint(0, cols, (rows, *extra), generator=generator)
        target.view(-1)[:: p.get("ignore_every", target.numel() + 1)] = -100
        target = target.to(device)
    kwargs: dict[str, Any] = {"reduction": p.get("reduction", "mean")}
    if p.get("weighted"):
        kwargs["weight"] = (torch.rand(cols, generator=generator) + 0.5).to(device=device, dtype=dtype)
    for name in ("label_smoothing", "z_loss", "softcap"):
        if name in p:
            kwargs[name] = p[name]
    return Inputs(args=(logits, target), kwargs=kwargs, grad=(0,))


def _cost(case: Case, dtype: str) -> Cost:
    # Forward only: reads the logits once, writes a loss per row.
    return _rows.streaming_cost(case, dtype, reads=1, writes=0, flops_per_element=4)


OPERATOR = Operator(
    name=NAME,
    summary="cross-entropy, streamed vocabulary: ignore_index, weights, smoothing, z-loss, softcap, N-D (fwd+bwd)",
    reference=reference,
    triton=cross_entropy,
    make_inputs=make_inputs,
    cases=(
        Case("mean-ignore-looped", {"rows": 6, "cols": 1000, "ignore_every": 4}, config={NAME: {"BLOCK": 256, "num_warps": 4}}),
        Case("sum", {"rows": 4, "cols": 256, "reduction": "sum"}),
        Case("none", {"rows": 5, "cols": 77, "reduction": "none", "ignore_every": 2}),
        Case(
            "nd-weighted-smoothed-looped",
            {"rows": 2, "cols": 300, "extra_dims": (3,), "weighted": True, "label_smoothing": 0.1, "ignore_every": 4},
            config={NAME: {"BLOCK": 128, "num_warps": 4}},
        ),
        Case("zloss-softcap-sum", {"rows": 4, "cols": 96, "reduction": "sum", "z_loss": 1e-2, "softcap": 4.0, "ignore_every": 3}),
        Case("none-smoothed-zloss", {"rows": 3, "cols": 64, "reduction": "none", "label_smoothing": 0.2, "z_loss": 1e-3}),
    ),
    device_cases=(Case("4096x32000", {"rows": 4096, "cols": 32000, "ignore_every": 7}),),
    bench_cases=(Case("8192x128256", {"rows": 8192, "cols": 128256}),),
    cost=_cost,
    torch_op=torch_op,
    config_space=SPACE,
    problem=_rows.problem,
    backward=True,
)
