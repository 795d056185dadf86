"""Rotary position embedding (forward and backward), rotate-half (GPT-NeoX/Llama) layout.

x is (batch, seq, heads, head_dim) with a contiguous last dimension (other
strides are free, so a (batch, heads, seq, dim) tensor passes as a transposed
view without a copy); cos and sin are (seq, head_dim/2) or (batch, seq, head_dim/2),
or head_dim wide with the usual duplicated halves. y = [x1 cos - x2 sin, x2 cos + x1 sin]
for the halves x1, x2 of each head. The backward is the same rotation by -angle.
"""

from __future__ import annotations

from typing import Any

import torch

from accelport.kernels import _rows, configs
from accelport.kernels.registry import Case, Cost, Inputs, KernelError, Operator
from accelport.kernels.tl_compat import launch, tl, triton

NAME = "rope"


def _angles(x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """cos or sin as (batch or 1, seq, half): the half-width table, trimmed to x's sequence length."""
    half = x.shape[-1] // 2
    if table.shape[-1] == 2 * half:
        table = table[..., :half]
    if table.shape[-1] != half or table.dim() not in (2, 3) or table.shape[-2] < x.shape[1]:
        raise KernelError(
            f"rope: cos/sin of shape {tuple(table.shape)} do not fit x of shape {tuple(x.shape)}; "
            "expected (seq, head_dim/2) or (batch, seq, head_dim/2)"
        )
    table = table[..., : x.shape[1], :]
    return table if table.dim() == 3 else table.unsqueeze(0)


def reference(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    c = _angles(x, cos).float().unsqueeze(-2)
    s = _angles(x, sin).float().unsqueeze(-2)
    x1, x2 = x.float().chunk(2, dim=-1)
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).to(x.dtype)


def torch_op(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """What a PyTorch model does without a fused kernel: rotate_half in the input dtype."""
    c = _angles(x, cos).to(x.dtype).unsqueeze(-2)
    s = _angles(x, sin).to(x.dtype).unsqueeze(-2)
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


@triton.jit
def _rope_kernel(
    x_ptr, cos_ptr, sin_ptr, y_ptr, seq_len, n_heads, half,
    sxb, sxs, sxh, syb, sys, syh, scb, scs,
    SIGN: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    token = tl.program_id(0)
    b = (token // seq_len).to(tl.int64)
    s = (token % seq_len).to(tl.int64)
    heads = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    d = tl.arange(0, BLOCK_D)
    d_ok = d < half
    mask = (heads < n_heads)[:, None] & d_ok[None, :]
    cos = tl.load(cos_ptr + b * scb + s * scs + d, mask=d_ok, other=0.0).to(tl.float32)[None, :]
    sin = SIGN * tl.load(sin_ptr + b * scb + s * scs + d, mask=d_ok, other=0.0).to(tl.float32)[None, :]
    x_tile = x_ptr + b * sxb + s * sxs + heads.to(tl.int64)[:, None] * sxh + d[None, :]
    y_tile = y_ptr + b * syb + s * sys + heads.to(tl.int64)[:, None] * syh + d[None, :]
    x1 = tl.load(x_tile, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(x_tile + half, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_tile, (x1 * cos - x2 * sin).to(y_ptr.dtype.element_ty), mask=mask)
    tl.store(y_tile + half, (x2 * cos + x1 * sin).to(y_ptr.dtype.element_ty), mask=mask)


def _heads_axis(p: configs.Problem, hw: Any) -> tuple[int, ...]:
    return tuple(h for h in configs.pow2_range(1, 64) if h <= configs.pow2_at_least(p["heads"]))


def _score(c: configs.Config, p: configs.Problem, hw: Any) -> float:
    tile = c["BLOCK_H"] * configs.pow2_at_least(p["head_dim"] // 2)
    per_thread = tile // max(c.num_warps * (hw.warp_size or 1), 1)
    # All heads of a token in one program if they fit, then about 4 elements per thread per half.
    return -min(c["BLOCK_H"], configs.pow2_at_least(p["heads"])) * 100 + abs(per_thread.bit_length() - 3)


SPACE = configs.ConfigSpace(
    axes={"BLOCK_H": _heads_axis},
    onchip_bytes=lambda c, p, hw: c["BLOCK_H"] * configs.pow2_at_least(p["head_dim"] // 2) * 4 * 6 * 2 if hw.grid_is_physical else 0,
    bucket=lambda p: configs.bucket_pow2(H=p["heads"], D=p["head_dim"]),
    score=_score,
    num_warps=lambda p, hw: (1,) if hw.warp_size == 0 else (1, 2, 4, 8),
)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, sign: float) -> torch.Tensor:
    if x.dim() != 4 or x.shape[-1] % 2:
        raise KernelError(f"rope: x must be (batch, seq, heads, head_dim) with an even head_dim, got {tuple(x.shape)}")
    if x.stride(-1) != 1:
        x = x.contiguous()
    # The tables are small (seq x head_dim/2): contiguous copies give both one set of strides.
    c, s = _angles(x, cos).contiguous(), _angles(x, sin).contiguous()
    batch, seq, heads, dim = x.shape
    y = torch.empty_like(x)
    problem = {"heads": heads, "head_dim": dim, "tokens": batch * seq, "dtype": _rows.dtype_name(x.dtype)}
    cfg = configs.choose(NAME, SPACE, problem, x.device)
    grid = (batch * seq, -(-heads // cfg["BLOCK_H"]))
    cb = c.stride(0) if c.shape[0] > 1 else 0
    launch(
        _rope_kernel, grid, x, c, s, y, seq, heads, dim // 2,
        x.stride(0), x.stride(1), x.stride(2), y.stride(0), y.stride(1), y.stride(2), cb, c.stride(1),
        SIGN=sign, BLOCK_D=configs.pow2_at_least(dim // 2), **cfg.launch_options(),
    )  # fmt: skip
    return y


class _Rope(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(cos, sin)
        return _rotate(x, cos, sin, 1.0)

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[Any, ...]:
        cos, sin = ctx.saved_tensors
        return _rotate(dy, cos, sin, -1.0), None, None


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """The Triton implementation, differentiable in x (cos and sin are tables, not parameters)."""
    return _Rope.apply(x, cos, sin)


def tables(seq: int, head_dim: int, base: float = 10000.0, device: Any = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin tables, (seq, head_dim/2) fp32, for the usual inverse-frequency schedule."""
    inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(seq, dtype=torch.float32), inv_freq)
    return angles.cos().to(device), angles.sin().to(device)


def make_inputs(case: Case, dtype: torch.dtype, device: Any, generator: torch.Generator) -> Inputs:
    p = case.params
    x = _rows.randn((p["batch"], p["seq"], p["heads"], p["head_dim"]), dtype, device, generator)
    if p.get("transposed"):  # (batch, heads, seq, dim) storage, passed as a view
        x = _rows.randn((p["batch"], p["heads"], p["seq"], p["head_dim"]), dtype, device, generator).transpose(1, 2)
    if torch.device(device).type == "meta":
        cos = sin = torch.empty((p["seq"], p["head_dim"] // 2), device="meta")
    else:
        cos, sin = tables(p["seq"] + 3, p["head_dim"], device=device)  # longer than seq: trimmed
    return Inputs(args=(x, cos, sin), grad=(0,))


def _problem(case: Case, dtype: str) -> dict[str, Any]:
    p = case.params
    return {"heads": p["heads"], "head_dim": p["head_dim"], "tokens": p["batch"] * p["seq"], "dtype": dtype}


def _cost(case: Case, dtype: str) -> Cost:
    p = case.params
    elements = p["batch"] * p["seq"] * p["heads"] * p["head_dim"]
    return Cost(flops=3 * elements, bytes=2 * elements * _rows.DTYPE_BYTES[dtype] + p["seq"] * p["head_dim"] * 4, bound="memory")


OPERATOR = Operator(
    name=NAME,
    summary="rotary position embedding, rotate-half layout, strided x (fwd+bwd)",
    reference=reference,
    triton=rope,
    make_inputs=make_inputs,
    cases=(
        Case("gqa-ragged-heads", {"batch": 2, "seq": 5, "heads": 3, "head_dim": 64}, config={NAME: {"BLOCK_H": 2, "num_warps": 1}}),
        Case("transposed", {"batch": 1, "seq": 6, "heads": 4, "head_dim": 32, "transposed": True}),
        Case("odd-half", {"batch": 1, "seq": 3, "heads": 2, "head_dim": 40}),
    ),
    device_cases=(Case("llama-8b", {"batch": 4, "seq": 2048, "heads": 32, "head_dim": 128}),),
    bench_cases=(Case("8x4096x32x128", {"batch": 8, "seq": 4096, "heads": 32, "head_dim": 128}),),
    cost=_cost,
    torch_op=torch_op,
    config_space=SPACE,
    problem=_problem,
    backward=True,
)
