"""LayerNorm over the last dimension (forward and backward), weight and optional bias, fp32 math.

The forward keeps mean and 1/std per row. As in RMSNorm, the backward gives each
program a run of rows and sums its share of d(weight) and d(bias) in registers;
the per-program partial rows are added on the host (deterministic, no atomics).
"""

from __future__ import annotations

from typing import Any

import torch

from accelport.kernels import _rows, configs
from accelport.kernels.registry import Case, Inputs, Operator
from accelport.kernels.tl_compat import launch, tl, triton

NAME = "layer_norm"


def reference(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None = None, eps: float = 1e-5) -> torch.Tensor:
    xf = x.float()
    mean = xf.mean(-1, keepdim=True)
    var = (xf - mean).pow(2).mean(-1, keepdim=True)
    y = (xf - mean) * torch.rsqrt(var + eps)
    if weight is not None:
        y = y * weight.float()
    if bias is not None:
        y = y + bias.float()
    return y.to(x.dtype)


def torch_op(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None = None, eps: float = 1e-5) -> torch.Tensor:
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), weight, bias, eps)


@triton.jit
def _layer_norm_fwd(
    x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, n_cols, x_stride, y_stride, eps,
    HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n_cols
    centered = tl.where(mask, x - mean, 0.0)
    rstd = tl.rsqrt(tl.sum(centered * centered, axis=0) / n_cols + eps)
    y = centered * rstd
    if HAS_WEIGHT:
        y = y * tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    if HAS_BIAS:
        y += tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)
    tl.store(y_ptr + row * y_stride + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _layer_norm_bwd(
    x_ptr, w_ptr, mean_ptr, rstd_ptr, dy_ptr, dx_ptr, dw_partial_ptr, db_partial_ptr,
    n_rows, n_cols, x_stride, dy_stride, dx_stride, rows_per_program,
    HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    # dx = rstd * (dy*w - mean(dy*w) - x_hat * mean(dy*w*x_hat)),  dw = sum dy*x_hat,  db = sum dy
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    if HAS_WEIGHT:
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    else:
        w = tl.where(mask, 1.0, 0.0)
    dw = tl.zeros([BLOCK], tl.float32)
    db = tl.zeros([BLOCK], tl.float32)
    first = pid.to(tl.int64) * rows_per_program  # int64 row offsets: rows x cols may pass 2**31
    for row in range(first, tl.minimum(first + rows_per_program, n_rows)):
        x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + row * dy_stride + cols, mask=mask, other=0.0).to(tl.float32)
        x_hat = tl.where(mask, (x - tl.load(mean_ptr + row)) * tl.load(rstd_ptr + row), 0.0)
        dyw = dy * w
        c1 = tl.sum(dyw * x_hat, axis=0) / n_cols
        c2 = tl.sum(dyw, axis=0) / n_cols
        dx = (dyw - c2 - x_hat * c1) * tl.load(rstd_ptr + row)
        tl.store(dx_ptr + row * dx_stride + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)
        dw += dy * x_hat
        if HAS_BIAS:
            db += dy
    if HAS_WEIGHT:
        tl.store(dw_partial_ptr + pid * n_cols + cols, dw, mask=mask)
    if HAS_BIAS:
        tl.store(db_partial_ptr + pid * n_cols + cols, db, mask=mask)


@triton.jit
def _layer_norm_fwd_looped(
    x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, n_cols, x_stride, y_stride, eps,
    HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    # A row wider than one tile: the mean, then the centred variance (not E[x^2] - mean^2, which cancels), then y.
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * x_stride
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        acc += tl.load(x_row + start + cols, mask=start + cols < n_cols, other=0.0).to(tl.float32)
    mean = tl.sum(acc, axis=0) / n_cols
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        mask = start + cols < n_cols
        centered = tl.where(mask, tl.load(x_row + start + cols, mask=mask, other=0.0).to(tl.float32) - mean, 0.0)
        acc += centered * centered
    rstd = tl.rsqrt(tl.sum(acc, axis=0) / n_cols + eps)
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)
    for start in range(0, n_cols, BLOCK):
        mask = start + cols < n_cols
        y = (tl.load(x_row + start + cols, mask=mask, other=0.0).to(tl.float32) - mean) * rstd
        if HAS_WEIGHT:
            y = y * tl.load(w_ptr + start + cols, mask=mask, other=0.0).to(tl.float32)
        if HAS_BIAS:
            y += tl.load(b_ptr + start + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * y_stride + start + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _layer_norm_bwd_looped(
    x_ptr, w_ptr, mean_ptr, rstd_ptr, dy_ptr, dx_ptr, dw_partial_ptr, db_partial_ptr,
    n_rows, n_cols, x_stride, dy_stride, dx_stride, rows_per_program,
    HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    # As _layer_norm_bwd, tile by tile; the program's parameter-gradient rows live in its own zeroed partial rows.
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    first = pid.to(tl.int64) * rows_per_program
    for row in range(first, tl.minimum(first + rows_per_program, n_rows)):
        mean = tl.load(mean_ptr + row)
        rstd = tl.load(rstd_ptr + row)
        acc1 = tl.zeros([BLOCK], tl.float32)
        acc2 = tl.zeros([BLOCK], tl.float32)
        for start in range(0, n_cols, BLOCK):
            mask = start + cols < n_cols
            x = tl.load(x_ptr + row * x_stride + start + cols, mask=mask, other=0.0).to(tl.float32)
            x_hat = tl.where(mask, (x - mean) * rstd, 0.0)
            dyw = tl.load(dy_ptr + row * dy_stride + start + cols, mask=mask, other=0.0).to(tl.float32)
            if HAS_WEIGHT:
                dyw = dyw * tl.load(w_ptr + start + cols, mask=mask, other=0.0).to(tl.float32)
            acc1 += dyw * x_hat
            acc2 += dyw
        c1 = tl.sum(acc1, axis=0) / n_cols
        c2 = tl.sum(acc2, axis=0) / n_cols
        for start in range(0, n_cols, BLOCK):
            mask = start + cols < n_cols
            x = tl.load(x_ptr + row * x_stride + start + cols, mask=mask, other=0.0).to(tl.float32)
            x_hat = tl.where(mask, (x - mean) * rstd, 0.0)
            dy = tl.load(dy_ptr + row * dy_stride + start + cols, mask=mask, other=0.0).to(tl.float32)
            dyw = dy
            if HAS_WEIGHT:
                dyw = dy * tl.load(w_ptr + start + cols, mask=mask, other=0.0).to(tl.float32)
                dw_row = dw_partial_ptr + pid * n_cols + start + cols
                tl.store(dw_row, tl.load(dw_row, mask=mask, other=0.0) + dy * x_hat, mask=mask)
            if HAS_BIAS:
                db_row = db_partial_ptr + pid * n_cols + start + cols
                tl.store(db_row, tl.load(db_row, mask=mask, other=0.0) + dy, mask=mask)
            tl.store(dx_ptr + row * dx_stride + start + cols, ((dyw - c2 - x_hat * c1) * rstd).to(dx_ptr.dtype.element_ty), mask=mask)


# A row that fits one tile is read once; a wider one (or one wider than the unified buffer holds) loops over tiles.
SPACE = configs.row_space(lambda p: p["cols"], buffers=5, max_block=32768)


def _config(x2d: torch.Tensor) -> configs.Config:
    return configs.choose(NAME, SPACE, _rows.problem_of(x2d), x2d.device)


def forward(
    x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(y, mean, 1/std): the normalised rows and the per-row statistics the backward reads."""
    _rows.check_weight(NAME, x, weight, bias)
    x2d = _rows.as_rows(x)
    n_rows, n_cols = x2d.shape
    y = torch.empty_like(x2d)
    mean = torch.empty(n_rows, dtype=torch.float32, device=x.device)
    rstd = torch.empty(n_rows, dtype=torch.float32, device=x.device)
    if x2d.numel():
        cfg = _config(x2d)
        some = x2d if weight is None else weight  # a valid pointer for an absent parameter, never read
        launch(
            _layer_norm_fwd if cfg["BLOCK"] >= n_cols else _layer_norm_fwd_looped, (n_rows,), x2d, some, some if bias is None else bias, y, mean, rstd, n_cols,
            x2d.stride(0), y.stride(0), eps, HAS_WEIGHT=weight is not None, HAS_BIAS=bias is not None,
            **cfg.launch_options(),
        )  # fmt: skip
    return y.view(x.shape), mean, rstd


def backward(
    x: torch.Tensor, weight: torch.Tensor | None, has_bias: bool, mean: torch.Tensor, rstd: torch.Tensor, dy: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """(dx, d weight, d bias) in fp32 for the parameters; None for a parameter that is absent."""
    x2d, dy2d = _rows.as_rows(x), _rows.as_rows(dy)
    n_rows, n_cols = x2d.shape
    dx = torch.empty_like(x2d)
    if not x2d.numel():  # an empty batch: no gradient flows into the parameters
        zeros = torch.zeros(n_cols, dtype=torch.float32, device=x.device)
        return dx.view(x.shape), None if weight is None else zeros, zeros if has_bias else None
    cfg = _config(x2d)
    programs, per_program = _rows.row_programs(n_rows, x2d.device, cfg)
    one_tile = cfg["BLOCK"] >= n_cols
    alloc = torch.empty if one_tile else torch.zeros  # looped: the kernel adds into its partial rows
    dw_partial = alloc((programs, n_cols), dtype=torch.float32, device=x2d.device)
    db_partial = alloc((programs, n_cols), dtype=torch.float32, device=x2d.device) if has_bias else dw_partial
    launch(
        _layer_norm_bwd if one_tile else _layer_norm_bwd_looped, (programs,), x2d, x2d if weight is None else weight, mean, rstd, dy2d, dx, dw_partial, db_partial,
        n_rows, n_cols, x2d.stride(0), dy2d.stride(0), dx.stride(0), per_program,
        HAS_WEIGHT=weight is not None, HAS_BIAS=has_bias, **cfg.launch_options(),
    )  # fmt: skip
    return dx.view(x.shape), None if weight is None else dw_partial.sum(0), db_partial.sum(0) if has_bias else None


class LayerNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float) -> torch.Tensor:
        y, mean, rstd = forward(x, weight, bias, eps)
        ctx.save_for_backward(x, weight, mean, rstd)
        ctx.bias_dtype = bias.dtype if bias is not None else None
        return y

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[Any, ...]:
        x, weight, mean, rstd = ctx.saved_tensors
        dx, dw, db = backward(x, weight, ctx.bias_dtype is not None, mean, rstd, dy)
        return dx, None if dw is None else dw.to(weight.dtype), None if db is None else db.to(ctx.bias_dtype), None


def layer_norm(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None = None, eps: float = 1e-5) -> torch.Tensor:
    """The Triton implementation, differentiable in x, weight and bias; either parameter may be None."""
    return LayerNorm.apply(x, weight, bias, eps)


def make_inputs(case: Case, dtype: torch.dtype, device: Any, generator: torch.Generator) -> Inputs:
    cols = case.params["cols"]
    # An offset mean makes a kernel that forgets to centre the row fail.
    x = _rows.random_rows(case, dtype, device, generator, scale=2.0)
    x = x + 3.0 if x.device.type != "meta" else x
    if not case.params.get("weight", True):
        return Inputs(args=(x, None, None), kwargs={"eps": 1e-5}, grad=(0,))
    weight = _rows.randn((cols,), dtype, device, generator, scale=0.5)
    if not case.params.get("bias", True):
        return Inputs(args=(x, weight), kwargs={"eps": 1e-5}, grad=(0, 1))
    bias = _rows.randn((cols,), dtype, device, generator)
    return Inputs(args=(x, weight, bias), kwargs={"eps": 1e-5}, grad=(0, 1, 2))


OPERATOR = Operator(
    name=NAME,
    summary="LayerNorm over the last dimension, optional bias, fp32 math (fwd+bwd)",
    reference=reference,
    triton=layer_norm,
    make_inputs=make_inputs,
    cases=(
        Case("ragged", {"rows": 9, "cols": 1000}, config={NAME: {"BLOCK": 1024, "num_warps": 4, "PROGRAMS": 4}}),
        Case("pow2-no-bias", {"rows": 4, "cols": 256, "bias": False}),
        Case("narrow", {"rows": 6, "cols": 40}),
        Case("no-weight-no-bias", {"rows": 3, "cols": 64, "weight": False}),
        Case("looped", {"rows": 5, "cols": 200}, config={NAME: {"BLOCK": 64, "num_warps": 1, "PROGRAMS": 2}}),
    ),
    device_cases=_rows.NORM_DEVICE_CASES,
    bench_cases=_rows.NORM_BENCH_CASES,
    cost=lambda case, dtype: _rows.streaming_cost(case, dtype, reads=1, writes=1, flops_per_element=7),
    torch_op=torch_op,
    config_space=SPACE,
    problem=_rows.problem,
    backward=True,
    tolerances={"float32": (1e-5, 1e-5), "float16": (2e-3, 2e-3), "bfloat16": (1.6e-2, 1.6e-2)},
)
