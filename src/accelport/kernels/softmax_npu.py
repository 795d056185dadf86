"""Softmax for Ascend (triton-ascend): a core-bound grid, each program looping over tiles of rows.

On Ascend a Triton grid maps to physical AI cores (grid <= vector cores), so
instead of one program per row, `PROGRAMS` programs stride over groups of `ROWS`
rows, and a tile of ROWS x BLOCK elements is sized to the unified buffer by the
configuration generator. The math is the generic kernel's: an online pass for
the running max and rescaled sum, then a pass that writes.
"""

from __future__ import annotations

import torch

from accelport.kernels import _rows, configs, hardware
from accelport.kernels.softmax import Softmax
from accelport.kernels.tl_compat import launch, tl, triton

NAME = "softmax_npu"
STAND_IN = "ascend-910b2"


@triton.jit
def _softmax_fwd_rows(
    x_ptr, y_ptr, n_rows, n_cols, x_stride, y_stride,
    PROGRAMS: tl.constexpr, ROWS: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    rows = tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    for first in range(tl.program_id(0) * ROWS, n_rows, PROGRAMS * ROWS):
        r = first + rows
        row_ok = r < n_rows
        x_rows = x_ptr + r.to(tl.int64)[:, None] * x_stride
        y_rows = y_ptr + r.to(tl.int64)[:, None] * y_stride
        m = tl.full([ROWS], -float("inf"), tl.float32)
        s = tl.zeros([ROWS], tl.float32)
        for start in range(0, n_cols, BLOCK):
            mask = row_ok[:, None] & (start + cols[None, :] < n_cols)
            x = tl.load(x_rows + start + cols[None, :], mask=mask, other=-float("inf")).to(tl.float32)
            m_new = tl.maximum(m, tl.max(x, axis=1))
            shift = tl.where(row_ok, m_new, 0.0)  # rows past the end hold only -inf
            s = s * tl.exp(m - shift) + tl.sum(tl.exp(x - shift[:, None]), axis=1)
            m = m_new
        m = tl.where(row_ok, m, 0.0)  # rows past the end: keep their (masked) math finite
        s = tl.where(row_ok, s, 1.0)
        for start in range(0, n_cols, BLOCK):
            mask = row_ok[:, None] & (start + cols[None, :] < n_cols)
            x = tl.load(x_rows + start + cols[None, :], mask=mask, other=-float("inf")).to(tl.float32)
            y = tl.exp(x - m[:, None]) / s[:, None]
            tl.store(y_rows + start + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


def _rows_axis(p: configs.Problem, hw: hardware.HardwareProfile) -> tuple[int, ...]:
    return tuple(r for r in configs.pow2_range(1, 64) if r <= configs.pow2_at_least(p["rows"]))


def _block_axis(p: configs.Problem, hw: hardware.HardwareProfile) -> tuple[int, ...]:
    need = configs.pow2_at_least(p["cols"])
    return tuple(b for b in configs.pow2_range(64, 16384) if b <= need) or (64,)


def _ub_bytes(c: configs.Config, p: configs.Problem, hw: hardware.HardwareProfile) -> int:
    # Live per tile: the loaded row tile, its exp and the output, fp32, double-buffered by the compiler.
    return c["ROWS"] * c["BLOCK"] * 4 * 3 * 2


def _score(c: configs.Config, p: configs.Problem, hw: hardware.HardwareProfile) -> float:
    passes = -(-p["cols"] // c["BLOCK"])
    # Fewest passes over a row, then the largest tile the buffer holds (long vector instructions).
    return passes * 1e9 - c["ROWS"] * c["BLOCK"]


SPACE = configs.ConfigSpace(
    axes={"ROWS": _rows_axis, "BLOCK": _block_axis, "PROGRAMS": lambda p, hw: (0,)},  # 0: one per vector core
    onchip_bytes=_ub_bytes,
    bucket=lambda p: configs.bucket_pow2(N=p["cols"]),
    score=_score,
    num_warps=lambda p, hw: (1,),
)


def forward(x: torch.Tensor) -> torch.Tensor:
    x2d = _rows.as_rows(x)
    y = torch.empty_like(x2d)
    cfg = configs.choose(NAME, SPACE, _rows.problem_of(x2d), x2d.device, stand_in=STAND_IN)
    n_rows, n_cols = x2d.shape
    cores = hardware.vector_cores(x2d.device, configs.profile_for(x2d.device, STAND_IN))
    programs = min(cfg["PROGRAMS"] or cores, -(-n_rows // cfg["ROWS"]))
    launch(
        _softmax_fwd_rows, (programs,), x2d, y, n_rows, n_cols, x2d.stride(0), y.stride(0),
        PROGRAMS=programs, ROWS=cfg["ROWS"], BLOCK=cfg["BLOCK"],
    )  # fmt: skip
    return y.view(x.shape)


def softmax(x: torch.Tensor) -> torch.Tensor:
    """The Ascend implementation: core-bound forward; the backward is the generic kernel's."""
    return Softmax.apply(x, forward)
