"""RMSNorm over the last dimension (forward and backward): y = x / sqrt(mean(x^2) + eps) * weight.

Math in fp32, output in x's dtype. The forward keeps 1/rms per row for the
backward. The backward gives each program a contiguous run of rows and has it
accumulate its share of d(weight) in registers; the partial sums (one row per
program) are added on the host, so no atomics and a deterministic result.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from accelport.kernels import _rows, configs
from accelport.kernels.registry import Case, Inputs, Operator
from accelport.kernels.tl_compat import launch, tl, triton

NAME = "rms_norm"


def reference(x: torch.Tensor, weight: torch.Tensor | None, eps: float = 1e-6) -> torch.Tensor:
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (y if weight is None else y * weight.float()).to(x.dtype)


def torch_op(x: torch.Tensor, weight: torch.Tensor | None, eps: float = 1e-6) -> torch.Tensor:
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), weight, eps)


@triton.jit
def _rms_norm_fwd(x_ptr, w_ptr, y_ptr, rstd_ptr, n_cols, x_stride, y_stride, eps, HAS_WEIGHT: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    y = x * rstd
    if HAS_WEIGHT:
        y = y * tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(rstd_ptr + row, rstd)
    tl.store(y_ptr + row * y_stride + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rms_norm_bwd(
    x_ptr, w_ptr, rstd_ptr, dy_ptr, dres_ptr, dx_ptr, dw_partial_ptr, n_rows, n_cols, x_stride, dy_stride, dres_stride,
    dx_stride, rows_per_program, HAS_WEIGHT: tl.constexpr, HAS_DRES: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    # dx = rstd * (dy*w - x_hat * mean(dy*w*x_hat)),  dw = sum_rows dy * x_hat
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    if HAS_WEIGHT:
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    else:
        w = tl.where(mask, 1.0, 0.0)
    dw = tl.zeros([BLOCK], tl.float32)
    first = pid.to(tl.int64) * rows_per_program  # int64 row offsets: rows x cols may pass 2**31
    for row in range(first, tl.minimum(first + rows_per_program, n_rows)):
        x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + row * dy_stride + cols, mask=mask, other=0.0).to(tl.float32)
        rstd = tl.load(rstd_ptr + row)
        x_hat = x * rstd
        dyw = dy * w
        dx = rstd * (dyw - x_hat * (tl.sum(dyw * x_hat, axis=0) / n_cols))
        if HAS_DRES:  # fused add + RMSNorm: the gradient reaching the sum directly (its residual output)
            dx += tl.load(dres_ptr + row * dres_stride + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(dx_ptr + row * dx_stride + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)
        dw += dy * x_hat
    if HAS_WEIGHT:
        tl.store(dw_partial_ptr + pid * n_cols + cols, dw, mask=mask)


@triton.jit
def _rms_norm_fwd_looped(
    x_ptr, w_ptr, y_ptr, rstd_ptr, n_cols, x_stride, y_stride, eps, HAS_WEIGHT: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    # A row wider than one tile (8192 columns in Ascend's unified buffer): sum of squares, then a pass that writes.
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    squares = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        x = tl.load(x_ptr + row * x_stride + start + cols, mask=start + cols < n_cols, other=0.0).to(tl.float32)
        squares += x * x
    rstd = tl.rsqrt(tl.sum(squares, axis=0) / n_cols + eps)
    tl.store(rstd_ptr + row, rstd)
    for start in range(0, n_cols, BLOCK):
        mask = start + cols < n_cols
        y = tl.load(x_ptr + row * x_stride + start + cols, mask=mask, other=0.0).to(tl.float32) * rstd
        if HAS_WEIGHT:
            y = y * tl.load(w_ptr + start + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * y_stride + start + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rms_norm_bwd_looped(
    x_ptr, w_ptr, rstd_ptr, dy_ptr, dres_ptr, dx_ptr, dw_partial_ptr, n_rows, n_cols, x_stride, dy_stride, dres_stride,
    dx_stride, rows_per_program, HAS_WEIGHT: tl.constexpr, HAS_DRES: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    # As _rms_norm_bwd, tile by tile; the program's d(weight) row lives in its own (zeroed) partial row in memory.
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    first = pid.to(tl.int64) * rows_per_program
    for row in range(first, tl.minimum(first + rows_per_program, n_rows)):
        rstd = tl.load(rstd_ptr + row)
        acc = tl.zeros([BLOCK], tl.float32)
        for start in range(0, n_cols, BLOCK):
            mask = start + cols < n_cols
            x = tl.load(x_ptr + row * x_stride + start + cols, mask=mask, other=0.0).to(tl.float32)
            dyw = tl.load(dy_ptr + row * dy_stride + start + cols, mask=mask, other=0.0).to(tl.float32)
            if HAS_WEIGHT:
                dyw = dyw * tl.load(w_ptr + start + cols, mask=mask, other=0.0).to(tl.float32)
            acc += dyw * x * rstd
        c = tl.sum(acc, axis=0) / n_cols
        for start in range(0, n_cols, BLOCK):
            mask = start + cols < n_cols
            x_hat = tl.load(x_ptr + row * x_stride + start + cols, mask=mask, other=0.0).to(tl.float32) * rstd
            dy = tl.load(dy_ptr + row * dy_stride + start + cols, mask=mask, other=0.0).to(tl.float32)
            dyw = dy
            if HAS_WEIGHT:
                dyw = dy * tl.load(w_ptr + start + cols, mask=mask, other=0.0).to(tl.float32)
                partial = dw_partial_ptr + pid * n_cols + start + cols
                tl.store(partial, tl.load(partial, mask=mask, other=0.0) + dy * x_hat, mask=mask)
            dx = rstd * (dyw - x_hat * c)
            if HAS_DRES:
                dx += tl.load(dres_ptr + row * dres_stride + start + cols, mask=mask, other=0.0).to(tl.float32)
            tl.store(dx_ptr + row * dx_stride + start + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)


# A row that fits one tile is read once; a wider one (or one wider than the unified buffer holds) loops over tiles.
SPACE = configs.row_space(lambda p: p["cols"], buffers=4, max_block=32768)


def _config(x2d: torch.Tensor) -> configs.Config:
    return configs.choose(NAME, SPACE, _rows.problem_of(x2d), x2d.device)


def forward(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    _rows.check_weight(NAME, x, weight)
    x2d = _rows.as_rows(x)
    y = torch.empty_like(x2d)
    rstd = torch.empty(x2d.shape[0], dtype=torch.float32, device=x.device)
    if x2d.numel():
        cfg = _config(x2d)
        kernel = _rms_norm_fwd if cfg["BLOCK"] >= x2d.shape[1] else _rms_norm_fwd_looped
        launch(
            kernel, (x2d.shape[0],), x2d, x2d if weight is None else weight, y, rstd, x2d.shape[1],
            x2d.stride(0), y.stride(0), eps, HAS_WEIGHT=weight is not None, **cfg.launch_options(),
        )  # fmt: skip
    return y.view(x.shape), rstd


def backward(
    x: torch.Tensor, weight: torch.Tensor | None, rstd: torch.Tensor, dy: torch.Tensor, max_programs: int | None = None,
    dres: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(dx, d weight); `dres`, a gradient that reaches x directly, is added to dx in the same pass."""
    x2d, dy2d = _rows.as_rows(x), _rows.as_rows(dy)
    dres2d = dy2d if dres is None else _rows.as_rows(dres)
    n_rows, n_cols = x2d.shape
    dx = torch.empty_like(x2d)
    if not x2d.numel():  # an empty batch: no gradient flows into the weight
        return dx.view(x.shape), None if weight is None else torch.zeros_like(weight)
    cfg = _config(x2d)
    programs, per_program = _rows.row_programs(n_rows, x.device, cfg, max_programs)
    one_tile = cfg["BLOCK"] >= n_cols
    partial = (torch.empty if one_tile else torch.zeros)((programs, n_cols), dtype=torch.float32, device=x.device)
    launch(
        _rms_norm_bwd if one_tile else _rms_norm_bwd_looped, (programs,), x2d, x2d if weight is None else weight, rstd, dy2d,
        dres2d, dx, partial, n_rows, n_cols, x2d.stride(0), dy2d.stride(0), dres2d.stride(0), dx.stride(0), per_program,
        HAS_WEIGHT=weight is not None, HAS_DRES=dres is not None, **cfg.launch_options(),
    )  # fmt: skip
    return dx.view(x.shape), None if weight is None else partial.sum(0).to(weight.dtype)


class RMSNorm(torch.autograd.Function):
    """Autograd around an RMSNorm forward launcher (this module's or a vendor override's) and the backward kernel.

    `max_programs` caps the backward's grid where it binds to physical cores.
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor | None, eps: float, launcher: Callable[..., Any], max_programs: int | None) -> torch.Tensor:
        y, rstd = launcher(x, weight, eps)
        ctx.save_for_backward(x, weight, rstd)
        ctx.max_programs = max_programs
        return y

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[Any, ...]:
        x, weight, rstd = ctx.saved_tensors
        dx, dw = backward(x, weight, rstd, dy, ctx.max_programs)
        return dx, dw, None, None, None


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float = 1e-6) -> torch.Tensor:
    """The Triton implementation, differentiable in x and weight; `weight=None` normalises only."""
    return RMSNorm.apply(x, weight, eps, forward, None)


def make_inputs(case: Case, dtype: torch.dtype, device: Any, generator: torch.Generator) -> Inputs:
    x = _rows.random_rows(case, dtype, device, generator, scale=2.0)
    if not case.params.get("weight", True):
        return Inputs(args=(x, None), kwargs={"eps": 1e-5}, grad=(0,))
    weight = _rows.randn((case.params["cols"],), dtype, device, generator, scale=0.5)
    return Inputs(args=(x, weight), kwargs={"eps": 1e-5}, grad=(0, 1))


OPERATOR = Operator(
    name=NAME,
    summary="RMSNorm over the last dimension, fp32 math (fwd+bwd)",
    reference=reference,
    triton=rms_norm,
    make_inputs=make_inputs,
    cases=(
        Case(
            "ragged",
            {"rows": 9, "cols": 1000},
            config={NAME: {"BLOCK": 1024, "num_warps": 4, "PROGRAMS": 4}, f"{NAME}_npu": {"ROWS": 2, "BLOCK": 256, "PROGRAMS": 2}},
        ),
        Case("pow2", {"rows": 4, "cols": 256}),
        Case("narrow", {"rows": 6, "cols": 40}),
        Case("no-weight", {"rows": 3, "cols": 64, "weight": False}),
        Case("looped", {"rows": 5, "cols": 200}, config={NAME: {"BLOCK": 64, "num_warps": 1, "PROGRAMS": 2}}),
        Case("looped-no-weight", {"rows": 3, "cols": 100, "weight": False}, config={NAME: {"BLOCK": 64, "num_warps": 1}}),
    ),
    device_cases=_rows.NORM_DEVICE_CASES,
    bench_cases=_rows.NORM_BENCH_CASES,
    cost=lambda case, dtype: _rows.streaming_cost(case, dtype, reads=1, writes=1, flops_per_element=4),
    torch_op=torch_op,
    config_space=SPACE,
    problem=_rows.problem,
    backward=True,
    overrides={"npu": "accelport.kernels.rms_norm_npu:rms_norm"},
    tolerances={"float32": (1e-5, 1e-5), "float16": (2e-3, 2e-3), "bfloat16": (1.6e-2, 1.6e-2)},
)
