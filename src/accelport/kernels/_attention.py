"""What flash attention and block-sparse attention share: the online-softmax step, shapes, reference, configs."""

from __future__ import annotations

import math
from typing import Any

import torch

from accelport.kernels import _rows, configs, tl_compat
from accelport.kernels.registry import KernelError
from accelport.kernels.tl_compat import tl, triton

LOG2E = 1.4426950408889634


@triton.jit
def attend(q, k_t, v, valid, m_i, l_i, acc, qk_scale):
    """One key/value tile of online softmax: scores q k^T, running max m_i, running sum l_i, output acc.

    `qk_scale` is softmax scale times log2(e), so exp2 gives exp. Masked scores are
    -inf; a row with nothing valid so far keeps m_i = -inf and contributes nothing.
    """
    s = tl_compat.dot(q, k_t, tl.zeros((q.shape[0], k_t.shape[1]), tl.float32)) * qk_scale
    s = tl.where(valid, s, -float("inf"))
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    shift = tl.where(m_new == -float("inf"), 0.0, m_new)
    p = tl.math.exp2(s - shift[:, None])
    alpha = tl.math.exp2(m_i - shift)
    l_i = l_i * alpha + tl.sum(p, axis=1)
    acc = tl_compat.dot(p.to(v.dtype), v, acc * alpha[:, None])
    return m_new, l_i, acc


@triton.jit
def attend_keys(q, k_base, v_base, keys, rows, d, d_ok, seq_k, sks, svs, m_i, l_i, acc, qk_scale, CAUSAL: tl.constexpr):
    """Load the K (transposed) and V tiles of `keys`, mask what a query may not see, and attend to them."""
    key_ok = keys < seq_k
    k_t = tl.load(k_base + keys[None, :] * sks + d[:, None], mask=key_ok[None, :] & d_ok[:, None], other=0.0)
    v = tl.load(v_base + keys[:, None] * svs + d[None, :], mask=key_ok[:, None] & d_ok[None, :], other=0.0)
    valid = key_ok[None, :]
    if CAUSAL:
        valid = valid & (rows[:, None] >= keys[None, :])
    return attend(q, k_t, v, valid, m_i, l_i, acc, qk_scale)


@triton.jit
def load_rows(base, rows, d, d_ok, n_rows, row_stride):
    """A (rows, head dim) tile of q, zero past the sequence end and the head dimension."""
    return tl.load(base + rows[:, None] * row_stride + d[None, :], mask=(rows < n_rows)[:, None] & d_ok[None, :], other=0.0)


@triton.jit
def store_rows(base, rows, d, d_ok, n_rows, row_stride, acc, l_i):
    """Write acc / l per query row, zero for a row that attended to nothing."""
    out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
    tl.store(base + rows[:, None] * row_stride + d[None, :], out.to(base.dtype.element_ty), mask=(rows < n_rows)[:, None] & d_ok[None, :])


def check_shapes(op: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[int, int, int, int, int, int]:
    """(batch, heads, kv heads, query length, key length, head dim) of (B, H, S, D) tensors, or a KernelError."""
    if q.dim() != 4 or k.dim() != 4 or v.shape != k.shape:
        raise KernelError(f"{op}: q, k, v must be (batch, heads, seq, head_dim) with k and v alike, got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    batch, heads, seq_q, dim = q.shape
    kv_heads, seq_k = k.shape[1], k.shape[2]
    if k.shape[0] != batch or k.shape[3] != dim or heads % kv_heads:
        raise KernelError(f"{op}: k/v {tuple(k.shape)} do not fit q {tuple(q.shape)}; heads must be a multiple of kv heads")
    if not (q.dtype == k.dtype == v.dtype):
        raise KernelError(f"{op}: q, k, v dtypes differ ({q.dtype}, {k.dtype}, {v.dtype})")
    return batch, heads, kv_heads, seq_q, seq_k, dim


def refuse_grad(op: str, *tensors: torch.Tensor) -> None:
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        raise KernelError(
            f"{op}: the Triton kernel is forward-only; for training set ACCELPORT_KERNEL_IMPL={op}=reference "
            "or call it under torch.no_grad()"
        )


def dense_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor, scale: float | None) -> torch.Tensor:
    """Attention in fp32 where `allowed` (broadcast to batch, heads, Sq, Sk) says which keys a query sees.

    A query that sees no key gets zeros.
    """
    heads, kv_heads = q.shape[1], k.shape[1]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    kf = k.float().repeat_interleave(heads // kv_heads, dim=1)
    vf = v.float().repeat_interleave(heads // kv_heads, dim=1)
    scores = (q.float() @ kf.transpose(-1, -2)) * scale
    scores = scores.masked_fill(~allowed, float("-inf"))
    probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return (probs @ vf).to(q.dtype)


def attention_stages(p: configs.Problem, hw: Any) -> tuple[int, ...]:
    return (1,) if hw.grid_is_physical else (1, 2) if hw.warp_size == 64 else (1, 2, 3, 4)


def attention_smem(block_m: int, block_n: int, stages: int, p: configs.Problem, hw: Any) -> int:
    """Q tile once, K and V tiles per pipeline buffer, and the P tile converted for the second dot."""
    elt = 4 if p["dtype"] == "float32" else 2
    d = configs.pow2_at_least(p["D"])
    return (block_m * d + configs.pipeline_buffers(stages, hw) * 2 * block_n * d + block_m * block_n) * elt


def qk_scale(dim: int, scale: float | None) -> float:
    return (1.0 / math.sqrt(dim) if scale is None else float(scale)) * LOG2E


def random_qkv(p: dict, dtype: Any, device: Any, generator: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    b, h, hkv, d = p["batch"], p["heads"], p.get("kv_heads", p["heads"]), p["head_dim"]
    sq, sk = p["seq_q"], p.get("seq_k", p["seq_q"])
    q = _rows.randn((b, h, sq, d), dtype, device, generator)
    k = _rows.randn((b, hkv, sk, d), dtype, device, generator)
    v = _rows.randn((b, hkv, sk, d), dtype, device, generator)
    return q, k, v
