"""Cross-entropy over class logits (forward and backward), with ignore_index and mean/sum/none reduction.

One program per row streams the logits in BLOCK-wide tiles with an online
log-sum-exp (a 128k vocabulary never needs a full row in registers); the loss and
the log-sum-exp are kept per row. The backward writes (softmax - one_hot) times
the row's share of the incoming gradient, re-reading the logits once.
"""

from __future__ import annotations

from typing import Any

import torch

from accelport.kernels import _rows, configs
from accelport.kernels.registry import Case, Cost, Inputs, KernelError, Operator
from accelport.kernels.tl_compat import launch, tl, triton

NAME = "cross_entropy"
REDUCTIONS = ("mean", "sum", "none")


def reference(logits: torch.Tensor, target: torch.Tensor, ignore_index: int = -100, reduction: str = "mean") -> torch.Tensor:
    loss = torch.nn.functional.cross_entropy(logits.float(), target, ignore_index=ignore_index, reduction=reduction)
    return loss.to(logits.dtype)


def torch_op(logits: torch.Tensor, target: torch.Tensor, ignore_index: int = -100, reduction: str = "mean") -> torch.Tensor:
    return torch.nn.functional.cross_entropy(logits, target, ignore_index=ignore_index, reduction=reduction)


@triton.jit
def _cross_entropy_fwd(
    x_ptr, target_ptr, loss_ptr, lse_ptr, n_cols, x_stride, ignore_index, BLOCK: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * x_stride
    cols = tl.arange(0, BLOCK)
    m = tl.max(tl.full([BLOCK], -float("inf"), tl.float32), axis=0)
    s = tl.sum(tl.zeros([BLOCK], tl.float32), axis=0)
    for start in range(0, n_cols, BLOCK):
        x = tl.load(x_row + start + cols, mask=start + cols < n_cols, other=-float("inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    lse = m + tl.log(s)
    target = tl.load(target_ptr + row)
    keep = target != ignore_index
    x_target = tl.load(x_row + tl.where(keep, target, 0)).to(tl.float32)
    tl.store(lse_ptr + row, lse)
    tl.store(loss_ptr + row, tl.where(keep, lse - x_target, 0.0))


@triton.jit
def _cross_entropy_bwd(
    x_ptr, target_ptr, lse_ptr, scale_ptr, dx_ptr, n_cols, x_stride, dx_stride, scale_stride, ignore_index,
    BLOCK: tl.constexpr,
):  # fmt: skip
    # d logits = (softmax(x) - one_hot(target)) * scale[row]; zero for ignored rows
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    target = tl.load(target_ptr + row)
    scale = tl.where(target != ignore_index, tl.load(scale_ptr + row * scale_stride).to(tl.float32), 0.0)
    lse = tl.load(lse_ptr + row)
    for start in range(0, n_cols, BLOCK):
        mask = start + cols < n_cols
        x = tl.load(x_ptr + row * x_stride + start + cols, mask=mask, other=0.0).to(tl.float32)
        grad = (tl.exp(x - lse) - tl.where(start + cols == target, 1.0, 0.0)) * scale
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


class _CrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, target: torch.Tensor, ignore_index: int, reduction: str) -> torch.Tensor:
        if reduction not in REDUCTIONS:
            raise KernelError(f"cross_entropy: reduction {reduction!r} is not one of {', '.join(REDUCTIONS)}")
        if logits.dim() != 2 or target.shape != logits.shape[:1]:
            raise KernelError(f"cross_entropy: logits must be (N, classes) and target (N,), got {tuple(logits.shape)} and {tuple(target.shape)}")
        x2d = _rows.as_rows(logits)
        target = target.contiguous()
        n_rows, n_cols = x2d.shape
        check_targets(target, n_cols, ignore_index)
        loss = torch.empty(n_rows, dtype=torch.float32, device=logits.device)
        lse = torch.empty(n_rows, dtype=torch.float32, device=logits.device)
        cfg = _config(x2d)
        launch(_cross_entropy_fwd, (n_rows,), x2d, target, loss, lse, n_cols, x2d.stride(0), ignore_index, **cfg.launch_options())
        valid = (target != ignore_index).sum()
        ctx.save_for_backward(x2d, target, lse, valid)
        ctx.ignore_index, ctx.reduction = ignore_index, reduction
        if reduction == "none":
            return loss.to(logits.dtype)
        total = loss.sum()
        return (total / valid if reduction == "mean" else total).to(logits.dtype)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        x2d, target, lse, valid = ctx.saved_tensors
        n_rows, n_cols = x2d.shape
        scale = grad.float()
        if ctx.reduction == "mean":
            scale = scale / valid
        scale = scale.reshape(-1).contiguous()
        scale_stride = 0 if scale.numel() == 1 else 1
        dx = torch.empty_like(x2d)
        cfg = _config(x2d)
        launch(
            _cross_entropy_bwd, (n_rows,), x2d, target, lse, scale, dx, n_cols, x2d.stride(0), dx.stride(0),
            scale_stride, ctx.ignore_index, **cfg.launch_options(),
        )  # fmt: skip
        return dx, None, None, None


def cross_entropy(logits: torch.Tensor, target: torch.Tensor, ignore_index: int = -100, reduction: str = "mean") -> torch.Tensor:
    """The Triton implementation, differentiable in the logits."""
    return _CrossEntropy.apply(logits, target, ignore_index, reduction)


def make_inputs(case: Case, dtype: torch.dtype, device: Any, generator: torch.Generator) -> Inputs:
    rows, cols = case.params["rows"], case.params["cols"]
    logits = _rows.random_rows(case, dtype, device, generator, scale=3.0)
    if torch.device(device).type == "meta":
        target = torch.empty(rows, dtype=torch.int64, device="meta")
    else:
        target = torch.randint(0, cols, (rows,), generator=generator)
        target[:: case.params.get("ignore_every", rows + 1)] = -100
        target = target.to(device)
    return Inputs(args=(logits, target), kwargs={"reduction": case.params.get("reduction", "mean")}, grad=(0,))


def _cost(case: Case, dtype: str) -> Cost:
    # Forward only: reads the logits once, writes a loss per row.
    return _rows.streaming_cost(case, dtype, reads=1, writes=0, flops_per_element=4)


OPERATOR = Operator(
    name=NAME,
    summary="cross-entropy with ignore_index, mean/sum/none, streamed vocabulary (fwd+bwd)",
    reference=reference,
    triton=cross_entropy,
    make_inputs=make_inputs,
    cases=(
        Case("mean-ignore-looped", {"rows": 6, "cols": 1000, "ignore_every": 4}, config={NAME: {"BLOCK": 256, "num_warps": 4}}),
        Case("sum", {"rows": 4, "cols": 256, "reduction": "sum"}),
        Case("none", {"rows": 5, "cols": 77, "reduction": "none", "ignore_every": 2}),
    ),
    device_cases=(Case("4096x32000", {"rows": 4096, "cols": 32000, "ignore_every": 7}),),
    bench_cases=(Case("8192x128256", {"rows": 8192, "cols": 128256}),),
    cost=_cost,
    torch_op=torch_op,
    config_space=SPACE,
    problem=_rows.problem,
    backward=True,
)
