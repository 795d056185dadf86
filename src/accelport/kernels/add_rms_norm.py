"""Fused residual add + RMSNorm (forward and backward): s = x + residual, y = rms_norm(s) * weight; returns (y, s).

A pre-norm decoder layer does `residual = residual + h; h = norm(residual)`: fused,
the sum is written once and normalised while it is still in registers. As in the
unfused model, the sum is rounded to the input dtype before it is normalised. The
backward is RMSNorm's backward kernel on the saved sum, which adds the gradient that
reaches the sum directly (through its use as the next residual) in the same pass.
"""

from __future__ import annotations

from typing import Any

import torch

from accelport.kernels import _rows, configs
from accelport.kernels import rms_norm as rms
from accelport.kernels.registry import Case, Inputs, KernelError, Operator
from accelport.kernels.tl_compat import launch, tl, triton

NAME = "add_rms_norm"


def reference(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None, eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    s = x + residual
    return rms.reference(s, weight, eps), s


def torch_op(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None, eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    s = x + residual
    return torch.nn.functional.rms_norm(s, (s.shape[-1],), weight, eps), s


@triton.jit
def _add_rms_norm_fwd(
    x_ptr, r_ptr, w_ptr, y_ptr, s_ptr, rstd_ptr, n_cols, x_stride, r_stride, y_stride, s_stride, eps,
    HAS_WEIGHT: tl.constexpr, ONE_TILE: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    if ONE_TILE:
        mask = cols < n_cols
        x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0).to(tl.float32)
        r = tl.load(r_ptr + row * r_stride + cols, mask=mask, other=0.0).to(tl.float32)
        s = (x + r).to(s_ptr.dtype.element_ty)
        tl.store(s_ptr + row * s_stride + cols, s, mask=mask)
        s = s.to(tl.float32)
        rstd = tl.rsqrt(tl.sum(s * s, axis=0) / n_cols + eps)
        y = s * rstd
        if HAS_WEIGHT:
            y = y * tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * y_stride + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
    else:  # a row wider than one tile: write the sum and its squares, then recompute the sum and normalise it
        squares = tl.zeros([BLOCK], tl.float32)
        for start in range(0, n_cols, BLOCK):
            mask = start + cols < n_cols
            x = tl.load(x_ptr + row * x_stride + start + cols, mask=mask, other=0.0).to(tl.float32)
            r = tl.load(r_ptr + row * r_stride + start + cols, mask=mask, other=0.0).to(tl.float32)
            s = (x + r).to(s_ptr.dtype.element_ty)
            tl.store(s_ptr + row * s_stride + start + cols, s, mask=mask)
            squares += s.to(tl.float32) * s.to(tl.float32)
        rstd = tl.rsqrt(tl.sum(squares, axis=0) / n_cols + eps)
        for start in range(0, n_cols, BLOCK):
            mask = start + cols < n_cols
            x = tl.load(x_ptr + row * x_stride + start + cols, mask=mask, other=0.0).to(tl.float32)
            r = tl.load(r_ptr + row * r_stride + start + cols, mask=mask, other=0.0).to(tl.float32)
            y = (x + r).to(s_ptr.dtype.element_ty).to(tl.float32) * rstd
            if HAS_WEIGHT:
                y = y * tl.load(w_ptr + start + cols, mask=mask, other=0.0).to(tl.float32)
            tl.store(y_ptr + row * y_stride + start + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
    tl.store(rstd_ptr + row, rstd)


# Live per tile: x, residual, the sum, the weight and y (fp32) in the unified buffer where the grid binds to cores.
SPACE = configs.row_space(lambda p: p["cols"], buffers=5, max_block=32768)


def forward(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None, eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(y, s, 1/rms of each row of s)."""
    if x.shape != residual.shape or x.dtype != residual.dtype:
        raise KernelError(f"{NAME}: x {tuple(x.shape)} {x.dtype} and residual {tuple(residual.shape)} {residual.dtype} must match")
    _rows.check_weight(NAME, x, weight)
    x2d, r2d = _rows.as_rows(x), _rows.as_rows(residual)
    y, s = torch.empty_like(x2d), torch.empty_like(x2d)
    rstd = torch.empty(x2d.shape[0], dtype=torch.float32, device=x.device)
    if x2d.numel():
        cfg = configs.choose(NAME, SPACE, _rows.problem_of(x2d), x2d.device)
        launch(
            _add_rms_norm_fwd, (x2d.shape[0],), x2d, r2d, x2d if weight is None else weight, y, s, rstd, x2d.shape[1],
            x2d.stride(0), r2d.stride(0), y.stride(0), s.stride(0), eps, HAS_WEIGHT=weight is not None,
            ONE_TILE=cfg["BLOCK"] >= x2d.shape[1], **cfg.launch_options(),
        )  # fmt: skip
    return y.view(x.shape), s.view(x.shape), rstd


class AddRMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
        y, s, rstd = forward(x, residual, weight, eps)
        ctx.save_for_backward(s, weight, rstd)
        return y, s

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor, ds: torch.Tensor) -> tuple[Any, ...]:
        s, weight, rstd = ctx.saved_tensors
        dx, dw = rms.backward(s, weight, rstd, dy, dres=ds)
        return dx, dx.clone(), dw, None  # x and residual get the same gradient, as separate tensors


def add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None, eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """The Triton implementation: (rms_norm(x + residual) * weight, x + residual), differentiable in all three."""
    return AddRMSNorm.apply(x, residual, weight, eps)


def make_inputs(case: Case, dtype: torch.dtype, device: Any, generator: torch.Generator) -> Inputs:
    x = _rows.random_rows(case, dtype, device, generator, scale=2.0)
    residual = _rows.random_rows(case, dtype, device, generator)
    if not case.params.get("weight", True):
        return Inputs(args=(x, residual, None), kwargs={"eps": 1e-5}, grad=(0, 1))
    weight = _rows.randn((case.params["cols"],), dtype, device, generator, scale=0.5)
    return Inputs(args=(x, residual, weight), kwargs={"eps": 1e-5}, grad=(0, 1, 2))


OPERATOR = Operator(
    name=NAME,
    summary="residual add fused with RMSNorm, returns (normed, sum) (fwd+bwd)",
    reference=reference,
    triton=add_rms_norm,
    make_inputs=make_inputs,
    cases=(
        Case("ragged", {"rows": 5, "cols": 100}),
        Case("looped", {"rows": 3, "cols": 200}, config={NAME: {"BLOCK": 64, "num_warps": 1}, "rms_norm": {"BLOCK": 64, "num_warps": 1}}),
        Case("no-weight", {"rows": 2, "cols": 64, "weight": False}),
    ),
    device_cases=_rows.NORM_DEVICE_CASES,
    bench_cases=_rows.NORM_BENCH_CASES,
    cost=lambda case, dtype: _rows.streaming_cost(case, dtype, reads=2, writes=2, flops_per_element=5),
    torch_op=torch_op,
    config_space=SPACE,
    problem=_rows.problem,
    backward=True,
    tolerances={"float32": (1e-5, 1e-5), "float16": (2e-3, 2e-3), "bfloat16": (1.6e-2, 1.6e-2)},
)
