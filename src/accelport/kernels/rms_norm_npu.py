"""RMSNorm for Ascend (triton-ascend): a core-bound grid, each program looping over tiles of rows.

As in `softmax_npu`, `PROGRAMS` programs (one per vector core) stride over groups
of `ROWS` rows; a ROWS x BLOCK tile is sized to the unified buffer, and a row
longer than BLOCK takes two passes (sum of squares, then scale and write). The
backward is the generic kernel launched with no more programs than vector cores.
"""

from __future__ import annotations

import torch

from accelport.kernels import _rows, configs, hardware
from accelport.kernels import rms_norm as generic
from accelport.kernels.softmax_npu import SPACE as ROW_TILE_SPACE
from accelport.kernels.tl_compat import launch, tl, triton

NAME = "rms_norm_npu"
STAND_IN = "ascend-910b2"
SPACE = ROW_TILE_SPACE  # the forward's row tiles; the backward plans with the generic kernel's space


@triton.jit
def _rms_norm_fwd_rows(
    x_ptr, w_ptr, y_ptr, rstd_ptr, n_rows, n_cols, x_stride, y_stride, eps,
    HAS_WEIGHT: tl.constexpr, PROGRAMS: tl.constexpr, ROWS: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    rows = tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    for first in range(tl.program_id(0) * ROWS, n_rows, PROGRAMS * ROWS):
        r = first + rows
        row_ok = r < n_rows
        x_rows = x_ptr + r.to(tl.int64)[:, None] * x_stride
        y_rows = y_ptr + r.to(tl.int64)[:, None] * y_stride
        squares = tl.zeros([ROWS], tl.float32)
        for start in range(0, n_cols, BLOCK):
            mask = row_ok[:, None] & (start + cols[None, :] < n_cols)
            x = tl.load(x_rows + start + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            squares += tl.sum(x * x, axis=1)
        rstd = tl.rsqrt(squares / n_cols + eps)
        tl.store(rstd_ptr + r, rstd, mask=row_ok)
        for start in range(0, n_cols, BLOCK):
            col_ok = start + cols < n_cols
            mask = row_ok[:, None] & col_ok[None, :]
            x = tl.load(x_rows + start + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            y = x * rstd[:, None]
            if HAS_WEIGHT:
                y = y * tl.load(w_ptr + start + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
            tl.store(y_rows + start + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


def forward(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    _rows.check_weight(NAME, x, weight)
    x2d = _rows.as_rows(x)
    n_rows, n_cols = x2d.shape
    y = torch.empty_like(x2d)
    rstd = torch.empty(n_rows, dtype=torch.float32, device=x.device)
    if not x2d.numel():
        return y.view(x.shape), rstd
    cfg = configs.choose(NAME, SPACE, _rows.problem_of(x2d), x2d.device, stand_in=STAND_IN)
    cores = hardware.vector_cores(x2d.device, configs.profile_for(x2d.device, STAND_IN))
    programs = min(cfg["PROGRAMS"] or cores, -(-n_rows // cfg["ROWS"]))
    launch(
        _rms_norm_fwd_rows, (programs,), x2d, x2d if weight is None else weight, y, rstd, n_rows, n_cols,
        x2d.stride(0), y.stride(0), eps, HAS_WEIGHT=weight is not None, PROGRAMS=programs, ROWS=cfg["ROWS"], BLOCK=cfg["BLOCK"],
    )  # fmt: skip
    return y.view(x.shape), rstd


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float = 1e-6) -> torch.Tensor:
    """The Ascend implementation: core-bound forward; generic backward with a core-bound grid."""
    cores = hardware.vector_cores(x.device, configs.profile_for(x.device, STAND_IN))
    return generic.RMSNorm.apply(x, weight, eps, forward, cores)
