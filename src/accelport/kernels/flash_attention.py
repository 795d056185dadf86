"""Flash attention forward: softmax(q k^T * scale [+ causal mask]) v without materialising the scores.

q is (batch, heads, seq_q, head_dim); k and v are (batch, kv_heads, seq_k, head_dim)
with heads a multiple of kv_heads (grouped-query attention: query head h reads
kv head h // (heads / kv_heads)). Causal masking follows
`torch.nn.functional.scaled_dot_product_attention(is_causal=True)`: query i sees
keys j <= i. One program per BLOCK_M queries of one (batch, head) streams BLOCK_N
keys at a time with an online softmax in base 2; a causal program stops at its
diagonal. Forward only: calling it on tensors that need gradients is an error.
"""

from __future__ import annotations

from typing import Any

import torch

from accelport.kernels import _attention, _rows, configs
from accelport.kernels.registry import Case, Cost, Inputs, Operator
from accelport.kernels.tl_compat import launch, tl, triton

NAME = "flash_attention"


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False, scale: float | None = None) -> torch.Tensor:
    seq_q, seq_k = q.shape[2], k.shape[2]
    allowed = torch.ones(seq_q, seq_k, dtype=torch.bool, device=q.device)
    if causal:
        allowed = allowed.tril()
    return _attention.dense_reference(q, k, v, allowed, scale)


def torch_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False, scale: float | None = None) -> torch.Tensor:
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale, enable_gqa=True)


@triton.jit
def _flash_attention_fwd(
    q_ptr, k_ptr, v_ptr, o_ptr, qk_scale, seq_q, seq_k, heads, group,
    sqb, sqh, sqs, skb, skh, sks, svb, svh, svs, sob, soh, sos,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
):  # fmt: skip
    start_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = (bh // heads).to(tl.int64)
    h = (bh % heads).to(tl.int64)
    kv = h // group
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    d = tl.arange(0, BLOCK_D)
    d_ok = d < HEAD_DIM
    q = _attention.load_rows(q_ptr + b * sqb + h * sqh, rows, d, d_ok, seq_q, sqs)
    k_base = k_ptr + b * skb + kv * skh
    v_base = v_ptr + b * svb + kv * svh
    m_i = tl.full([BLOCK_M], -float("inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    end = seq_k
    if CAUSAL:  # keys past the block's last query are all masked: stop at the diagonal
        end = tl.minimum(seq_k, (start_m + 1) * BLOCK_M)
    for start_n in range(0, end, BLOCK_N):
        m_i, l_i, acc = _attention.attend_keys(
            q, k_base, v_base, start_n + cols, rows, d, d_ok, seq_k, sks, svs, m_i, l_i, acc, qk_scale, CAUSAL
        )
    _attention.store_rows(o_ptr + b * sob + h * soh, rows, d, d_ok, seq_q, sos, acc, l_i)


def _reject(c: configs.Config, p: configs.Problem, hw: Any) -> str | None:
    if c["BLOCK_N"] > max(configs.pow2_at_least(p["Sk"]), 16) or c["BLOCK_M"] > max(configs.pow2_at_least(p["Sq"]), 16):
        return "tile larger than the sequence"
    if hw.warp_size and c["BLOCK_M"] * configs.pow2_at_least(p["D"]) // (c.num_warps * hw.warp_size) > 128:
        return "output accumulator over 128 fp32 registers per thread"
    if hw.warp_size and c["BLOCK_M"] < 16 * c.num_warps // 4:
        return "fewer than 16 query rows per warp group"
    if p["dtype"] == "float32" and c["BLOCK_M"] * c["BLOCK_N"] > 64 * 64:
        return "fp32 runs IEEE FMAs, not the matrix unit: larger tiles spill (and take a minute to compile)"
    return None


def _score(c: configs.Config, p: configs.Problem, hw: Any) -> float:
    programs = -(-p["Sq"] // c["BLOCK_M"]) * p["B"] * p["H"]
    starved = programs < max(hw.cores, 1)
    stages = 2 if hw.warp_size == 64 else 3
    return starved * 1e6 - c["BLOCK_M"] * c["BLOCK_N"] + abs(c.num_stages - stages) * 100 + (c["BLOCK_M"] < c["BLOCK_N"]) * 5000


SPACE = configs.ConfigSpace(
    axes={"BLOCK_M": lambda p, hw: (16, 32, 64, 128), "BLOCK_N": lambda p, hw: (16, 32, 64, 128)},
    onchip_bytes=lambda c, p, hw: _attention.attention_smem(c["BLOCK_M"], c["BLOCK_N"], c.num_stages, p, hw),
    bucket=lambda p: f"D{p['D']}-{configs.bucket_pow2(S=p['Sk'])}{'-causal' if p['causal'] else ''}",
    score=_score,
    num_warps=configs.matrix_warps,
    num_stages=_attention.attention_stages,
    reject=_reject,
)


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False, scale: float | None = None) -> torch.Tensor:
    """The Triton implementation (forward only)."""
    _attention.refuse_grad(NAME, q, k, v)
    batch, heads, kv_heads, seq_q, seq_k, dim = _attention.check_shapes(NAME, q, k, v)
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    out = torch.empty_like(q)
    problem = {"B": batch, "H": heads, "Sq": seq_q, "Sk": seq_k, "D": dim, "causal": bool(causal), "dtype": _rows.dtype_name(q.dtype)}
    cfg = configs.choose(NAME, SPACE, problem, q.device)
    grid = (-(-seq_q // cfg["BLOCK_M"]), batch * heads)
    launch(
        _flash_attention_fwd, grid, q, k, v, out, _attention.qk_scale(dim, scale), seq_q, seq_k, heads, heads // kv_heads,
        *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *out.stride()[:3],
        HEAD_DIM=dim, BLOCK_D=configs.pow2_at_least(max(dim, 16)), CAUSAL=bool(causal), **cfg.launch_options(),
    )  # fmt: skip
    return out


def make_inputs(case: Case, dtype: torch.dtype, device: Any, generator: torch.Generator) -> Inputs:
    q, k, v = _attention.random_qkv(dict(case.params), dtype, device, generator)
    return Inputs(args=(q, k, v), kwargs={"causal": case.params.get("causal", False)})


def _problem(case: Case, dtype: str) -> dict[str, Any]:
    p = case.params
    return {"B": p["batch"], "H": p["heads"], "Sq": p["seq_q"], "Sk": p.get("seq_k", p["seq_q"]), "D": p["head_dim"], "causal": p.get("causal", False), "dtype": dtype}


def _cost(case: Case, dtype: str) -> Cost:
    p = _problem(case, dtype)
    pairs = p["Sq"] * p["Sk"] * (0.5 if p["causal"] else 1.0)
    flops = 4.0 * p["B"] * p["H"] * pairs * p["D"]
    kv_heads = case.params.get("kv_heads", p["H"])
    elements = p["B"] * p["D"] * (2 * p["H"] * p["Sq"] + 2 * kv_heads * p["Sk"])
    return Cost(flops=flops, bytes=elements * (4 if dtype == "float32" else 2), bound="compute")


OPERATOR = Operator(
    name=NAME,
    summary="attention forward, online softmax, causal or not, grouped-query heads",
    reference=reference,
    triton=flash_attention,
    make_inputs=make_inputs,
    cases=(
        Case("gqa-ragged", {"batch": 1, "heads": 4, "kv_heads": 2, "seq_q": 100, "head_dim": 64}, config={NAME: {"BLOCK_M": 32, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2}}),
        Case("causal", {"batch": 2, "heads": 2, "seq_q": 128, "head_dim": 32, "causal": True}, config={NAME: {"BLOCK_M": 32, "BLOCK_N": 16, "num_warps": 4, "num_stages": 2}}),
        Case("causal-gqa-odd-dim", {"batch": 1, "heads": 2, "kv_heads": 1, "seq_q": 77, "head_dim": 40, "causal": True}),
        Case("cross", {"batch": 1, "heads": 2, "seq_q": 48, "seq_k": 130, "head_dim": 32}),
    ),
    device_cases=(
        Case("llama-causal", {"batch": 2, "heads": 32, "kv_heads": 8, "seq_q": 2048, "head_dim": 128, "causal": True}),
        Case("d64-ragged", {"batch": 3, "heads": 12, "seq_q": 1000, "head_dim": 64}),
    ),
    bench_cases=(
        Case("b4-h32-s4096-d128-causal", {"batch": 4, "heads": 32, "seq_q": 4096, "head_dim": 128, "causal": True}),
        Case("b4-h32-s4096-d128", {"batch": 4, "heads": 32, "seq_q": 4096, "head_dim": 128}),
    ),
    cost=_cost,
    torch_op=torch_op,
    config_space=SPACE,
    problem=_problem,
    tolerances={"float32": (1e-5, 1e-5), "float16": (2e-3, 2e-3), "bfloat16": (1.6e-2, 1.6e-2)},
    backward_fallback="recompute",  # FlashAttention: the Triton forward, gradients by a PyTorch recompute
)


class FlashAttention(torch.autograd.Function):
    """The flash-attention forward kernel for training: the backward recomputes attention in fp32 with PyTorch.

    There is no backward kernel yet; the recompute materialises the (Sq, Sk) scores of
    one call, which is what eager attention costs, and gives exact gradients.
    """

    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float | None) -> torch.Tensor:
        ctx.save_for_backward(q, k, v)
        ctx.causal, ctx.scale = causal, scale
        with torch.no_grad():
            return flash_attention(q, k, v, causal, scale)

    @staticmethod
    def backward(ctx: Any, do: torch.Tensor) -> tuple[Any, ...]:
        # Under enable(), the recompute runs PyTorch's own ops, not the overrides.
        from accelport.kernels.aten import bypassing

        q, k, v = ctx.saved_tensors
        with torch.enable_grad(), bypassing():
            leaves = [t.detach().float().requires_grad_(need) for t, need in zip((q, k, v), ctx.needs_input_grad[:3], strict=True)]
            out = reference(*leaves, causal=ctx.causal, scale=ctx.scale)
            wanted = [t for t in leaves if t.requires_grad]
            grads = iter(torch.autograd.grad(out, wanted, do.float()))
        needs = ctx.needs_input_grad[:3]
        return (*(next(grads).to(t.dtype) if need else None for t, need in zip((q, k, v), needs, strict=True)), None, None)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False, scale: float | None = None) -> torch.Tensor:
    """Flash attention that trains: the Triton forward; gradients by a PyTorch recompute (see FlashAttention)."""
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        return FlashAttention.apply(q, k, v, causal, scale)
    return flash_attention(q, k, v, causal, scale)
