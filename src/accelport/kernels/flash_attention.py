"""Flash attention (forward and backward): softmax(q k^T * scale [+ causal mask]) v without materialising the scores.

q is (batch, heads, seq_q, head_dim); k and v are (batch, kv_heads, seq_k, head_dim)
with heads a multiple of kv_heads (grouped-query attention: query head h reads
kv head h // (heads / kv_heads)). Causal masking is top-left aligned by default, as
`torch.nn.functional.scaled_dot_product_attention(is_causal=True)` (query i sees keys
j <= i); `bottom_right=True` aligns the last query with the last key (query i sees
j <= i + seq_k - seq_q), FlashAttention's convention for decoding with a KV cache.
A query that sees no key gets zeros. One program per BLOCK_M queries of one
(batch, head) streams BLOCK_N keys at a time with an online softmax in base 2; a
causal program stops at its diagonal, and keeps each row's log-sum-exp for the backward.

The backward is FlashAttention-2's: d = rowsum(dO * O); one kernel per key block
recomputes P from q, k and the saved log-sum-exp and accumulates dK and dV over every
query head of its KV group (no atomics); another per query block accumulates dQ.
"""

from __future__ import annotations

import itertools
from typing import Any

import torch

from accelport.kernels import _attention, _rows, configs, tl_compat
from accelport.kernels.registry import Case, Cost, Inputs, KernelError, Operator
from accelport.kernels.tl_compat import launch, tl, triton

NAME = "flash_attention"


def causal_mask(seq_q: int, seq_k: int, bottom_right: bool, device: Any = "cpu") -> torch.Tensor:
    """(seq_q, seq_k) booleans: query i sees key j <= i (top-left) or j <= i + seq_k - seq_q (bottom-right)."""
    return torch.ones(seq_q, seq_k, dtype=torch.bool, device=device).tril(seq_k - seq_q if bottom_right else 0)


def reference(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False, scale: float | None = None,
    bottom_right: bool = False,
) -> torch.Tensor:  # fmt: skip
    seq_q, seq_k = q.shape[2], k.shape[2]
    allowed = torch.ones(seq_q, seq_k, dtype=torch.bool, device=q.device)
    if causal:
        allowed = causal_mask(seq_q, seq_k, bottom_right, q.device)
    return _attention.dense_reference(q, k, v, allowed, scale)


def torch_op(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False, scale: float | None = None,
    bottom_right: bool = False,
) -> torch.Tensor:  # fmt: skip
    if causal and bottom_right and q.shape[2] != k.shape[2]:
        mask = causal_mask(q.shape[2], k.shape[2], True, q.device)
        if not mask.any(-1).all():  # SDPA gives NaN for a query that sees no key; the kernels give zeros
            return reference(q, k, v, causal, scale, bottom_right)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=True)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale, enable_gqa=True)


@triton.jit
def _flash_attention_fwd(
    q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, qk_scale, seq_q, seq_k, heads, group, offset,
    sqb, sqh, sqs, skb, skh, sks, svb, svh, svs, sob, soh, sos,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, STORE_LSE: tl.constexpr = False,
):  # fmt: skip
    # offset: 0 for top-left causal alignment, seq_k - seq_q for bottom-right; query i sees keys j <= i + offset
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
        end = tl.minimum(seq_k, (start_m + 1) * BLOCK_M + offset)
    for start_n in range(0, end, BLOCK_N):
        m_i, l_i, acc = _attention.attend_keys(
            q, k_base, v_base, start_n + cols, rows + offset, d, d_ok, seq_k, sks, svs, m_i, l_i, acc, qk_scale, CAUSAL
        )
    _attention.store_rows(o_ptr + b * sob + h * soh, rows, d, d_ok, seq_q, sos, acc, l_i)
    if STORE_LSE:  # log2-sum-exp2 of the scaled scores; +inf for a row that saw no key (its P is then 0)
        lse = tl.where(l_i == 0.0, float("inf"), m_i + tl.math.log2(tl.where(l_i == 0.0, 1.0, l_i)))
        tl.store(lse_ptr + bh.to(tl.int64) * seq_q + rows, lse, mask=rows < seq_q)


@triton.jit
def _scores(q, k_t, rows, keys, seq_q, seq_k, offset, qk_scale, lse, CAUSAL: tl.constexpr):
    """P of one (query block, key block) tile, recomputed from the saved log-sum-exp; 0 where masked."""
    s = tl_compat.dot(q, k_t, tl.zeros((q.shape[0], k_t.shape[1]), tl.float32)) * qk_scale
    valid = (rows < seq_q)[:, None] & (keys < seq_k)[None, :]
    if CAUSAL:
        valid = valid & (rows[:, None] + offset >= keys[None, :])
    return tl.where(valid, tl.math.exp2(s - lse[:, None]), 0.0)


@triton.jit
def _flash_attention_bwd_dkdv(
    q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr, qk_scale, sm_scale, seq_q, seq_k, heads, kv_heads,
    group, offset, sqb, sqh, sqs, skb, skh, sks, svb, svh, svs, sdob, sdoh, sdos, sdkb, sdkh, sdks,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
):  # fmt: skip
    # dV = sum_h P^T dO,  dK = sum_h dS^T Q * scale, dS = P * (dO V^T - delta), over the query heads h of this KV head
    start_n = tl.program_id(0)
    bkv = tl.program_id(1)
    b = (bkv // kv_heads).to(tl.int64)
    kv = (bkv % kv_heads).to(tl.int64)
    keys = start_n * BLOCK_N + tl.arange(0, BLOCK_N)
    d = tl.arange(0, BLOCK_D)
    d_ok = d < HEAD_DIM
    k = _attention.load_rows(k_ptr + b * skb + kv * skh, keys, d, d_ok, seq_k, sks)
    v = _attention.load_rows(v_ptr + b * svb + kv * svh, keys, d, d_ok, seq_k, svs)
    dk = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    first = 0
    if CAUSAL:  # query blocks wholly before this key block's first key see none of it
        first = tl.maximum(start_n * BLOCK_N - offset, 0) // BLOCK_M * BLOCK_M
    for g in range(0, group):
        h = kv * group + g
        bh = b * heads + h
        for start_m in range(first, seq_q, BLOCK_M):
            rows = start_m + tl.arange(0, BLOCK_M)
            q = _attention.load_rows(q_ptr + b * sqb + h * sqh, rows, d, d_ok, seq_q, sqs)
            do = _attention.load_rows(do_ptr + b * sdob + h * sdoh, rows, d, d_ok, seq_q, sdos)
            lse = tl.load(lse_ptr + bh * seq_q + rows, mask=rows < seq_q, other=float("inf"))
            delta = tl.load(delta_ptr + bh * seq_q + rows, mask=rows < seq_q, other=0.0)
            p = _scores(q, tl.trans(k), rows, keys, seq_q, seq_k, offset, qk_scale, lse, CAUSAL)
            dv = tl_compat.dot(tl.trans(p).to(do.dtype), do, dv)
            dp = tl_compat.dot(do, tl.trans(v), tl.zeros((BLOCK_M, BLOCK_N), tl.float32))
            ds = p * (dp - delta[:, None])
            dk = tl_compat.dot(tl.trans(ds).to(q.dtype), q, dk)
    out = (keys < seq_k)[:, None] & d_ok[None, :]
    offs = b * sdkb + kv * sdkh + keys.to(tl.int64)[:, None] * sdks + d[None, :]
    tl.store(dk_ptr + offs, (dk * sm_scale).to(dk_ptr.dtype.element_ty), mask=out)
    tl.store(dv_ptr + offs, dv.to(dv_ptr.dtype.element_ty), mask=out)


@triton.jit
def _flash_attention_bwd_dq(
    q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dq_ptr, qk_scale, sm_scale, seq_q, seq_k, heads, group, offset,
    sqb, sqh, sqs, skb, skh, sks, svb, svh, svs, sdob, sdoh, sdos,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
):  # fmt: skip
    # dQ = dS K * scale, dS = P * (dO V^T - delta), over the keys this query block sees
    start_m = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    b = bh // heads
    h = bh % heads
    kv = h // group
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    d = tl.arange(0, BLOCK_D)
    d_ok = d < HEAD_DIM
    q = _attention.load_rows(q_ptr + b * sqb + h * sqh, rows, d, d_ok, seq_q, sqs)
    do = _attention.load_rows(do_ptr + b * sdob + h * sdoh, rows, d, d_ok, seq_q, sdos)
    lse = tl.load(lse_ptr + bh * seq_q + rows, mask=rows < seq_q, other=float("inf"))
    delta = tl.load(delta_ptr + bh * seq_q + rows, mask=rows < seq_q, other=0.0)
    dq = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    end = seq_k
    if CAUSAL:
        end = tl.minimum(seq_k, (start_m + 1) * BLOCK_M + offset)
    for start_n in range(0, end, BLOCK_N):
        keys = start_n + tl.arange(0, BLOCK_N)
        k = _attention.load_rows(k_ptr + b * skb + kv * skh, keys, d, d_ok, seq_k, sks)
        v = _attention.load_rows(v_ptr + b * svb + kv * svh, keys, d, d_ok, seq_k, svs)
        p = _scores(q, tl.trans(k), rows, keys, seq_q, seq_k, offset, qk_scale, lse, CAUSAL)
        dp = tl_compat.dot(do, tl.trans(v), tl.zeros((BLOCK_M, BLOCK_N), tl.float32))
        ds = p * (dp - delta[:, None])
        dq = tl_compat.dot(ds.to(k.dtype), k, dq)
    tl.store(
        dq_ptr + b * sqb + h * sqh + rows.to(tl.int64)[:, None] * sqs + d[None, :], (dq * sm_scale).to(dq_ptr.dtype.element_ty),
        mask=(rows < seq_q)[:, None] & d_ok[None, :],
    )  # fmt: skip


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


def _problem_of(q: torch.Tensor, k: torch.Tensor, causal: bool) -> dict[str, Any]:
    batch, heads, seq_q, dim = q.shape
    return {"B": batch, "H": heads, "Sq": seq_q, "Sk": k.shape[2], "D": dim, "causal": bool(causal), "dtype": _rows.dtype_name(q.dtype)}


def forward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float | None, bottom_right: bool, store_lse: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(out, log2-sum-exp2 per query row as (batch * heads, seq_q), or None)."""
    batch, heads, kv_heads, seq_q, seq_k, dim = _attention.check_shapes(NAME, q, k, v)
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    out = torch.empty_like(q)
    lse = torch.empty((batch * heads, seq_q), dtype=torch.float32, device=q.device) if store_lse else None
    if not out.numel():
        return out, lse
    cfg = configs.choose(NAME, SPACE, _problem_of(q, k, causal), q.device)
    grid = (-(-seq_q // cfg["BLOCK_M"]), batch * heads)
    offset = seq_k - seq_q if causal and bottom_right else 0
    launch(
        _flash_attention_fwd, grid, q, k, v, out, out if lse is None else lse, _attention.qk_scale(dim, scale), seq_q, seq_k,
        heads, heads // kv_heads, offset, *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *out.stride()[:3],
        HEAD_DIM=dim, BLOCK_D=configs.pow2_at_least(max(dim, 16)), CAUSAL=bool(causal), STORE_LSE=store_lse,
        **cfg.launch_options(),
    )  # fmt: skip
    return out, lse


def _backward_config(dim: int, dtype: torch.dtype, device: Any) -> dict[str, int]:
    """Tiles of the backward kernels, which hold four (tile, head dim) operands at once.

    64 rows on NVIDIA for 16-bit types (wgmma needs 64 per warp group; q, dO, K and V
    tiles of 64 x 128 take 64 KiB of the 227); 32 where they would overflow AMD's 64 KiB
    of LDS at head_dim 128, and for fp32 (IEEE FMAs, no matrix unit).
    """
    hw = configs.profile_for(device)
    small = dtype == torch.float32 or (hw.warp_size == 64 and dim > 64) or hw.grid_is_physical
    block = 32 if small else 64
    return {"BLOCK_M": block, "BLOCK_N": block, "num_warps": 1 if hw.grid_is_physical else 4, "num_stages": 1}


def backward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor, do: torch.Tensor,
    causal: bool, scale: float | None, bottom_right: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    batch, heads, kv_heads, seq_q, seq_k, dim = _attention.check_shapes(NAME, q, k, v)
    q, k, v, do = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v, do))
    dq = torch.empty_like(q)
    if dq.stride() != q.stride():  # dq is written with q's strides
        q = q.contiguous()
        dq = torch.empty_like(q)
    dk = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    dv = torch.empty(k.shape, dtype=v.dtype, device=v.device)
    if not q.numel() or not k.numel():
        return dq.zero_(), dk.zero_(), dv.zero_()
    delta = (do.float() * out.float()).sum(-1).reshape(batch * heads, seq_q).contiguous()
    qk, sm = _attention.qk_scale(dim, scale), _attention.qk_scale(dim, scale) / _attention.LOG2E
    offset = seq_k - seq_q if causal and bottom_right else 0
    tiles = _backward_config(dim, q.dtype, q.device)
    pins = configs.pinned_config(NAME + "_bwd")
    if pins is not None:
        tiles = pins.launch_options()
    consts = {"HEAD_DIM": dim, "BLOCK_D": configs.pow2_at_least(max(dim, 16)), "CAUSAL": bool(causal), **tiles}
    group = heads // kv_heads
    launch(
        _flash_attention_bwd_dkdv, (-(-seq_k // tiles["BLOCK_N"]), batch * kv_heads), q, k, v, do, lse, delta, dk, dv, qk, sm,
        seq_q, seq_k, heads, kv_heads, group, offset, *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *do.stride()[:3],
        *dk.stride()[:3], **consts,
    )  # fmt: skip
    launch(
        _flash_attention_bwd_dq, (-(-seq_q // tiles["BLOCK_M"]), batch * heads), q, k, v, do, lse, delta, dq, qk, sm,
        seq_q, seq_k, heads, group, offset, *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *do.stride()[:3], **consts,
    )  # fmt: skip
    return dq, dk, dv


class FlashAttention(torch.autograd.Function):
    """Flash attention with the backward kernels: only the output and one log-sum-exp per query row are saved."""

    @staticmethod
    def forward(
        ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float | None, bottom_right: bool
    ) -> torch.Tensor:
        out, lse = forward(q, k, v, causal, scale, bottom_right, store_lse=True)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal, ctx.scale, ctx.bottom_right = causal, scale, bottom_right
        return out

    @staticmethod
    def backward(ctx: Any, do: torch.Tensor) -> tuple[Any, ...]:
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = backward(q, k, v, out, lse, do, ctx.causal, ctx.scale, ctx.bottom_right)
        return dq, dk, dv, None, None, None


def flash_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False, scale: float | None = None,
    bottom_right: bool = False,
) -> torch.Tensor:  # fmt: skip
    """The Triton implementation, differentiable in q, k and v (the log-sum-exp is kept only when it will be needed)."""
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        return FlashAttention.apply(q, k, v, causal, scale, bottom_right)
    return forward(q, k, v, causal, scale, bottom_right, store_lse=False)[0]


attention = flash_attention  # the name enable() and patch() use


def flash_attention_varlen(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor,
    causal: bool = False, scale: float | None = None, bottom_right: bool = False,
) -> torch.Tensor:  # fmt: skip
    """Variable-length batches packed as FlashAttention's varlen API packs them: q (total_q, heads, head_dim),
    k and v (total_k, kv_heads, head_dim), sequence i being rows cu_seqlens[i]:cu_seqlens[i + 1].

    Each sequence runs the kernels on a (1, heads, len, head_dim) view of the packed rows
    (no copy: the kernels take strided q, k, v), so padding costs nothing; differentiable,
    through the same kernels. One launch per sequence, not one for the batch.
    """
    if q.dim() != 3 or k.dim() != 3 or v.shape != k.shape:
        raise KernelError(f"{NAME}: varlen q must be (total_q, heads, dim) and k, v (total_k, kv_heads, dim), got {tuple(q.shape)}, {tuple(k.shape)}")
    bounds_q, bounds_k = [int(x) for x in cu_seqlens_q.tolist()], [int(x) for x in cu_seqlens_k.tolist()]
    if len(bounds_q) != len(bounds_k) or bounds_q[0] != 0 or bounds_k[0] != 0 or bounds_q[-1] != q.shape[0] or bounds_k[-1] != k.shape[0]:
        raise KernelError(f"{NAME}: cu_seqlens must start at 0, end at the packed lengths ({q.shape[0]}, {k.shape[0]}) and agree in count")
    if any(b < a for bounds in (bounds_q, bounds_k) for a, b in itertools.pairwise(bounds)):
        raise KernelError(f"{NAME}: cu_seqlens must not decrease")
    pieces = []
    for i in range(len(bounds_q) - 1):
        qi = q[bounds_q[i] : bounds_q[i + 1]].transpose(0, 1).unsqueeze(0)  # (1, heads, len, dim), a view
        ki = k[bounds_k[i] : bounds_k[i + 1]].transpose(0, 1).unsqueeze(0)
        vi = v[bounds_k[i] : bounds_k[i + 1]].transpose(0, 1).unsqueeze(0)
        pieces.append(flash_attention(qi, ki, vi, causal, scale, bottom_right)[0].transpose(0, 1))
    return torch.cat(pieces, dim=0) if pieces else q.new_empty(q.shape)


def make_inputs(case: Case, dtype: torch.dtype, device: Any, generator: torch.Generator) -> Inputs:
    q, k, v = _attention.random_qkv(dict(case.params), dtype, device, generator)
    kwargs = {"causal": case.params.get("causal", False), "bottom_right": case.params.get("bottom_right", False)}
    return Inputs(args=(q, k, v), kwargs=kwargs, grad=(0, 1, 2))


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
    summary="flash attention, causal (top-left or bottom-right) or not, grouped-query heads (fwd+bwd)",
    reference=reference,
    triton=flash_attention,
    make_inputs=make_inputs,
    cases=(
        Case("gqa-ragged", {"batch": 1, "heads": 4, "kv_heads": 2, "seq_q": 100, "head_dim": 64}, config={NAME: {"BLOCK_M": 32, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2}}),
        Case("causal", {"batch": 2, "heads": 2, "seq_q": 128, "head_dim": 32, "causal": True}, config={NAME: {"BLOCK_M": 32, "BLOCK_N": 16, "num_warps": 4, "num_stages": 2}}),
        Case("causal-gqa-odd-dim", {"batch": 1, "heads": 2, "kv_heads": 1, "seq_q": 77, "head_dim": 40, "causal": True}),
        Case("cross", {"batch": 1, "heads": 2, "seq_q": 48, "seq_k": 130, "head_dim": 32}),
        Case(
            "bottom-right-decode-gqa",
            {"batch": 1, "heads": 4, "kv_heads": 2, "seq_q": 20, "seq_k": 70, "head_dim": 32, "causal": True, "bottom_right": True},
            config={NAME: {"BLOCK_M": 16, "BLOCK_N": 16, "num_warps": 4, "num_stages": 1}, f"{NAME}_bwd": {"BLOCK_M": 16, "BLOCK_N": 16, "num_warps": 4, "num_stages": 1}},
        ),
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
    backward=True,
)

