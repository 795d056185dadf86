"""Fused softmax over the last dimension (forward and backward), fp32 math whatever the storage dtype.

One program per row. A row that fits one tile is read once; a longer row takes
an online pass (running max and rescaled sum) and a second pass that writes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from accelport.kernels import _rows, configs
from accelport.kernels.registry import Case, Inputs, Operator
from accelport.kernels.tl_compat import launch, tl, triton

NAME = "softmax"


def reference(x: torch.Tensor) -> torch.Tensor:
    """softmax(x, dim=-1), computed in fp32 and returned in x's dtype."""
    return torch.softmax(x, dim=-1, dtype=torch.float32).to(x.dtype)


def torch_op(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


@triton.jit
def _softmax_fwd(x_ptr, y_ptr, n_cols, x_stride, y_stride, BLOCK: tl.constexpr, ONE_TILE: tl.constexpr, LOG: tl.constexpr = False):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * x_stride
    y_row = y_ptr + row * y_stride
    cols = tl.arange(0, BLOCK)
    if ONE_TILE:
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=-float("inf")).to(tl.float32)
        shifted = x - tl.max(x, axis=0)
        e = tl.exp(shifted)
        y = shifted - tl.log(tl.sum(e, axis=0)) if LOG else e / tl.sum(e, axis=0)
        tl.store(y_row + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
    else:
        m = tl.max(tl.full([BLOCK], -float("inf"), tl.float32), axis=0)
        s = tl.sum(tl.zeros([BLOCK], tl.float32), axis=0)
        for start in range(0, n_cols, BLOCK):
            mask = start + cols < n_cols
            x = tl.load(x_row + start + cols, mask=mask, other=-float("inf")).to(tl.float32)
            m_new = tl.maximum(m, tl.max(x, axis=0))
            s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
            m = m_new
        for start in range(0, n_cols, BLOCK):
            mask = start + cols < n_cols
            x = tl.load(x_row + start + cols, mask=mask, other=-float("inf")).to(tl.float32)
            y = x - m - tl.log(s) if LOG else tl.exp(x - m) / s
            tl.store(y_row + start + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_bwd(
    y_ptr, dy_ptr, dx_ptr, n_cols, y_stride, dy_stride, dx_stride, BLOCK: tl.constexpr, ONE_TILE: tl.constexpr,
    LOG: tl.constexpr = False,
):  # fmt: skip
    # softmax: dx = y * (dy - sum(y * dy));  log-softmax (y = log p): dx = dy - exp(y) * sum(dy)
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    if ONE_TILE:
        mask = cols < n_cols
        y = tl.load(y_ptr + row * y_stride + cols, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + row * dy_stride + cols, mask=mask, other=0.0).to(tl.float32)
        if LOG:
            dx = dy - tl.exp(y) * tl.sum(dy, axis=0)
        else:
            dx = y * (dy - tl.sum(y * dy, axis=0))
        tl.store(dx_ptr + row * dx_stride + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)
    else:
        acc = tl.zeros([BLOCK], tl.float32)
        for start in range(0, n_cols, BLOCK):
            mask = start + cols < n_cols
            y = tl.load(y_ptr + row * y_stride + start + cols, mask=mask, other=0.0).to(tl.float32)
            dy = tl.load(dy_ptr + row * dy_stride + start + cols, mask=mask, other=0.0).to(tl.float32)
            acc += dy if LOG else y * dy
        dot = tl.sum(acc, axis=0)
        for start in range(0, n_cols, BLOCK):
            mask = start + cols < n_cols
            y = tl.load(y_ptr + row * y_stride + start + cols, mask=mask, other=0.0).to(tl.float32)
            dy = tl.load(dy_ptr + row * dy_stride + start + cols, mask=mask, other=0.0).to(tl.float32)
            dx = dy - tl.exp(y) * dot if LOG else y * (dy - dot)
            tl.store(dx_ptr + row * dx_stride + start + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)


SPACE = configs.row_space(lambda p: p["cols"], buffers=3)


def _config(x2d: torch.Tensor) -> configs.Config:
    return configs.choose(NAME, SPACE, _rows.problem_of(x2d), x2d.device)


def forward(x: torch.Tensor, log: bool = False) -> torch.Tensor:
    """softmax (or, with `log`, log-softmax) over the last dimension."""
    x2d = _rows.as_rows(x)
    y = torch.empty_like(x2d)
    if x2d.numel():
        cfg = _config(x2d)
        one_tile = cfg["BLOCK"] >= x2d.shape[1]
        launch(
            _softmax_fwd, (x2d.shape[0],), x2d, y, x2d.shape[1], x2d.stride(0), y.stride(0), ONE_TILE=one_tile, LOG=log,
            **cfg.launch_options(),
        )  # fmt: skip
    return y.view(x.shape)


def backward(y: torch.Tensor, dy: torch.Tensor, log: bool = False) -> torch.Tensor:
    """The input gradient from the output `y` (log-probabilities with `log`) and its gradient `dy`."""
    y2d, dy2d = _rows.as_rows(y), _rows.as_rows(dy)
    dx = torch.empty_like(y2d)
    if y2d.numel():
        cfg = _config(y2d)
        one_tile = cfg["BLOCK"] >= y2d.shape[1]
        launch(
            _softmax_bwd, (y2d.shape[0],), y2d, dy2d, dx, y2d.shape[1], y2d.stride(0), dy2d.stride(0), dx.stride(0),
            ONE_TILE=one_tile, LOG=log, **cfg.launch_options(),
        )  # fmt: skip
    return dx.view(y.shape)


class Softmax(torch.autograd.Function):
    """Autograd around a softmax forward launcher (this module's, or a vendor override's) and the backward kernel."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, launcher: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        y = launcher(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[torch.Tensor, None]:
        (y,) = ctx.saved_tensors
        return backward(y, dy), None


def softmax(x: torch.Tensor) -> torch.Tensor:
    """The Triton implementation, differentiable."""
    return Softmax.apply(x, forward)


def make_inputs(case: Case, dtype: torch.dtype, device: Any, generator: torch.Generator) -> Inputs:
    # Scale 4 spreads the probabilities over several decades, so a dropped or extra column shows.
    return Inputs(args=(_rows.random_rows(case, dtype, device, generator, scale=4.0),), grad=(0,))


OPERATOR = Operator(
    name=NAME,
    summary="softmax over the last dimension, fp32 math (fwd+bwd)",
    reference=reference,
    triton=softmax,
    make_inputs=make_inputs,
    cases=(
        Case("ragged", {"rows": 5, "cols": 1000}),
        Case("pow2", {"rows": 3, "cols": 256}),
        Case(
            "looped",
            {"rows": 7, "cols": 700},
            config={NAME: {"BLOCK": 256, "num_warps": 4}, f"{NAME}_npu": {"ROWS": 2, "BLOCK": 256, "PROGRAMS": 2}},
        ),
    ),
    device_cases=(Case("4096x4096", {"rows": 4096, "cols": 4096}), Case("512x50257", {"rows": 512, "cols": 50257})),
    bench_cases=(Case("8192x8192", {"rows": 8192, "cols": 8192}), Case("4096x32768", {"rows": 4096, "cols": 32768})),
    cost=lambda case, dtype: _rows.streaming_cost(case, dtype, reads=1, writes=1, flops_per_element=4),
    torch_op=torch_op,
    config_space=SPACE,
    problem=_rows.problem,
    backward=True,
    overrides={"npu": "accelport.kernels.softmax_npu:softmax"},
    tolerances={"float32": (1e-5, 1e-5), "float16": (2e-4, 2e-3), "bfloat16": (1.6e-2, 1.6e-2)},
)
