"""Block-sparse attention forward over a CSR block layout, and converters into that layout.

The sequence is cut into blocks of `block_size` tokens. A `BlockLayout` says,
per head, which key blocks each query block attends to, in compressed sparse
row form: `row_ptr` (heads, query_blocks + 1) and `col_idx` (heads, max nnz),
both int32; query block r of head h reads key blocks col_idx[h, row_ptr[h, r]:row_ptr[h, r+1]].
A layout with one head is shared by all heads. A query block with no key block
(an empty row) outputs zeros. The result equals dense attention restricted to
the same block mask (with `causal`, also to keys j <= i); work scales with the
number of stored blocks.

Converters: `BlockLayout.from_block_mask` (a dense boolean block mask) and
`BlockLayout.from_topk` (top-k key-block indices per query block, or per query
token, where a block row takes the union of its tokens' choices); -1 marks an
unused slot. Forward only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from accelport.kernels import _attention, _rows, configs
from accelport.kernels.registry import Case, Cost, Inputs, KernelError, Operator
from accelport.kernels.tl_compat import launch, tl, triton

NAME = "block_sparse_attention"


@dataclass(frozen=True)
class BlockLayout:
    """A CSR block layout: which key blocks each query block attends to, per head."""

    row_ptr: torch.Tensor  # (heads, query_blocks + 1) int32, non-decreasing, row_ptr[:, 0] == 0
    col_idx: torch.Tensor  # (heads, max nnz) int32; entries past a head's row_ptr[-1] are padding
    block_size: int
    key_blocks: int

    @property
    def heads(self) -> int:
        return int(self.row_ptr.shape[0])

    @property
    def query_blocks(self) -> int:
        return int(self.row_ptr.shape[1]) - 1

    def nnz(self) -> int:
        """Stored blocks over all heads."""
        return int(self.row_ptr[:, -1].sum())

    def to(self, device: Any) -> BlockLayout:
        return BlockLayout(self.row_ptr.to(device), self.col_idx.to(device), self.block_size, self.key_blocks)

    def block_mask(self) -> torch.Tensor:
        """The dense (heads, query_blocks, key_blocks) boolean mask this layout stands for."""
        row_ptr, col_idx = self.row_ptr.cpu().long(), self.col_idx.cpu().long()
        mask = torch.zeros(self.heads, self.query_blocks, self.key_blocks, dtype=torch.bool)
        for h in range(self.heads):
            counts = row_ptr[h, 1:] - row_ptr[h, :-1]
            rows = torch.repeat_interleave(torch.arange(self.query_blocks), counts)
            mask[h, rows, col_idx[h, : int(row_ptr[h, -1])]] = True
        return mask

    def validate(self, heads: int, seq_q: int, seq_k: int) -> None:
        """Raise KernelError unless this layout fits attention of `heads` heads over seq_q x seq_k tokens."""
        size = self.block_size
        if size < 16 or size & (size - 1):
            raise KernelError(f"{NAME}: block_size must be a power of two >= 16, got {size}")
        if self.heads not in (1, heads):
            raise KernelError(f"{NAME}: layout has {self.heads} heads; use 1 (shared) or {heads}")
        if self.query_blocks != -(-seq_q // size) or self.key_blocks != -(-seq_k // size):
            raise KernelError(
                f"{NAME}: layout is {self.query_blocks}x{self.key_blocks} blocks but {seq_q}x{seq_k} tokens "
                f"need {-(-seq_q // size)}x{-(-seq_k // size)} blocks of {size}"
            )
        if self.row_ptr.dtype != torch.int32 or self.col_idx.dtype != torch.int32:
            raise KernelError(f"{NAME}: row_ptr and col_idx must be int32")

    @classmethod
    def from_block_mask(cls, mask: torch.Tensor, block_size: int) -> BlockLayout:
        """From a boolean mask (query_blocks, key_blocks) or (heads, query_blocks, key_blocks)."""
        if mask.dim() == 2:
            mask = mask.unsqueeze(0)
        if mask.dim() != 3:
            raise KernelError(f"{NAME}: block mask must be 2-D or 3-D, got shape {tuple(mask.shape)}")
        mask = mask.bool().cpu()
        heads, rows, key_blocks = mask.shape
        counts = mask.sum(-1)
        row_ptr = torch.zeros(heads, rows + 1, dtype=torch.int32)
        row_ptr[:, 1:] = counts.cumsum(-1)
        width = max(int(row_ptr[:, -1].max()), 1)
        col_idx = torch.zeros(heads, width, dtype=torch.int32)
        for h in range(heads):
            cols = mask[h].nonzero()[:, 1]  # row-major: row by row, columns ascending
            col_idx[h, : cols.numel()] = cols.int()
        return cls(row_ptr, col_idx, block_size, key_blocks)

    @classmethod
    def from_topk(cls, indices: torch.Tensor, key_blocks: int, block_size: int, per_token: bool = False) -> BlockLayout:
        """From top-k key-block indices: (rows, k) or (heads, rows, k), -1 for an unused slot.

        Rows are query blocks, or query tokens with `per_token=True`: then each block
        row attends to the union of the blocks its tokens chose, a superset of each
        token's own choice (block granularity), and the dense equivalent is that union.
        Duplicates are merged and columns sorted.
        """
        if indices.dim() == 2:
            indices = indices.unsqueeze(0)
        if indices.dim() != 3:
            raise KernelError(f"{NAME}: top-k indices must be 2-D or 3-D, got shape {tuple(indices.shape)}")
        indices = indices.long().cpu()
        if ((indices < -1) | (indices >= key_blocks)).any():
            raise KernelError(f"{NAME}: top-k indices must be -1 or in [0, {key_blocks})")
        heads, rows, _ = indices.shape
        query_blocks = -(-rows // block_size) if per_token else rows
        owner = torch.arange(rows) // block_size if per_token else torch.arange(rows)
        mask = torch.zeros(heads, query_blocks, key_blocks + 1, dtype=torch.bool)  # last column absorbs -1
        h = torch.arange(heads)[:, None, None].expand_as(indices)
        r = owner[None, :, None].expand_as(indices)
        mask[h, r, indices.where(indices >= 0, key_blocks)] = True
        return cls.from_block_mask(mask[..., :key_blocks], block_size)


def token_mask(layout: BlockLayout, seq_q: int, seq_k: int, causal: bool) -> torch.Tensor:
    """The (heads, seq_q, seq_k) boolean token mask the layout (and `causal`) allow."""
    size = layout.block_size
    mask = layout.block_mask().repeat_interleave(size, 1).repeat_interleave(size, 2)[:, :seq_q, :seq_k]
    if causal:
        mask = mask & torch.ones(seq_q, seq_k, dtype=torch.bool).tril()
    return mask


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: BlockLayout, causal: bool = False, scale: float | None = None) -> torch.Tensor:
    allowed = token_mask(layout, q.shape[2], k.shape[2], causal).to(q.device)
    return _attention.dense_reference(q, k, v, allowed.unsqueeze(0), scale)


def torch_op(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: BlockLayout | torch.Tensor, causal: bool = False, scale: float | None = None
) -> torch.Tensor:
    """PyTorch's dense attention with the layout as a token mask: what one would run without a sparse kernel.

    `layout` may also be that boolean token mask, (1 or heads, seq_q, seq_k) on q's
    device, as `torch_inputs` builds it once for the benchmark.
    """
    if isinstance(layout, BlockLayout):
        allowed = token_mask(layout, q.shape[2], k.shape[2], causal).to(q.device).unsqueeze(0)
    else:
        allowed = layout if layout.dim() == 4 else layout.unsqueeze(0)
        if causal:
            allowed = allowed & torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device).tril()
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=scale, enable_gqa=True)


def torch_inputs(inputs: Inputs) -> Inputs:
    """The benchmark's inputs for `torch_op`: the layout made a dense token mask on q's device, once.

    Causal masking is folded into the mask. Building it inside the timed call
    would charge PyTorch for a conversion a dense model never does.
    """
    q, k, v, layout = inputs.args
    kwargs = dict(inputs.kwargs)
    causal = kwargs.pop("causal", False)
    allowed = token_mask(layout, q.shape[2], k.shape[2], causal).to(q.device).unsqueeze(0)
    return Inputs(args=(q, k, v, allowed), kwargs=kwargs, grad=inputs.grad)


@triton.jit
def _block_sparse_attention_fwd(
    q_ptr, k_ptr, v_ptr, o_ptr, row_ptr_ptr, col_idx_ptr, qk_scale, seq_q, seq_k, heads, group,
    layout_head_stride, rp_stride, ci_stride,
    sqb, sqh, sqs, skb, skh, sks, svb, svh, svs, sob, soh, sos,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
):  # fmt: skip
    # A program owns BLOCK_M query rows inside one layout block row and walks that row's key
    # blocks BLOCK_N keys at a time, so the tile fits on chip whatever the layout's block size.
    start_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = (bh // heads).to(tl.int64)
    h = (bh % heads).to(tl.int64)
    kv = h // group
    lh = h * layout_head_stride  # 0 when one layout serves every head
    block_row = (start_m * BLOCK_M) // BLOCK
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
    first = tl.load(row_ptr_ptr + lh * rp_stride + block_row)
    last = tl.load(row_ptr_ptr + lh * rp_stride + block_row + 1)
    for i in range(first, last):
        block_start = tl.load(col_idx_ptr + lh * ci_stride + i) * BLOCK
        for sub in range(0, BLOCK, BLOCK_N):
            m_i, l_i, acc = _attention.attend_keys(
                q, k_base, v_base, block_start + sub + cols, rows, d, d_ok, seq_k, sks, svs, m_i, l_i, acc, qk_scale, CAUSAL
            )
    _attention.store_rows(o_ptr + b * sob + h * soh, rows, d, d_ok, seq_q, sos, acc, l_i)


def _tile_axis(p: configs.Problem, hw: Any) -> tuple[int, ...]:
    return tuple(t for t in (16, 32, 64, 128) if t <= p["block"])


def _score(c: configs.Config, p: configs.Problem, hw: Any) -> float:
    stages = 2 if hw.warp_size == 64 else 3
    return -c["BLOCK_M"] * c["BLOCK_N"] + abs(c.num_stages - stages) * 100 + (c["BLOCK_M"] < c["BLOCK_N"]) * 5000


def _reject(c: configs.Config, p: configs.Problem, hw: Any) -> str | None:
    if hw.warp_size and c["BLOCK_M"] * configs.pow2_at_least(p["D"]) // (c.num_warps * hw.warp_size) > 128:
        return "output accumulator over 128 fp32 registers per thread"
    if hw.warp_size and c["BLOCK_M"] < 16 * c.num_warps // 4:
        return "fewer than 16 query rows per warp group"
    if p["dtype"] == "float32" and c["BLOCK_M"] * c["BLOCK_N"] > 64 * 64:
        return "fp32 runs IEEE FMAs, not the matrix unit: larger tiles spill (and take a minute to compile)"
    return None


SPACE = configs.ConfigSpace(
    axes={"BLOCK_M": _tile_axis, "BLOCK_N": _tile_axis},  # tiles of the layout's block, which fixes nothing else
    onchip_bytes=lambda c, p, hw: _attention.attention_smem(c["BLOCK_M"], c["BLOCK_N"], c.num_stages, p, hw),
    bucket=lambda p: f"D{p['D']}-B{p['block']}",
    score=_score,
    num_warps=configs.matrix_warps,
    num_stages=_attention.attention_stages,
    reject=_reject,
)


def block_sparse_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: BlockLayout, causal: bool = False, scale: float | None = None
) -> torch.Tensor:
    """The Triton implementation (forward only)."""
    _attention.refuse_grad(NAME, q, k, v)
    batch, heads, kv_heads, seq_q, seq_k, dim = _attention.check_shapes(NAME, q, k, v)
    layout.validate(heads, seq_q, seq_k)
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    row_ptr, col_idx = layout.row_ptr.to(q.device).contiguous(), layout.col_idx.to(q.device).contiguous()
    out = torch.empty_like(q)
    problem = {"block": layout.block_size, "D": dim, "dtype": _rows.dtype_name(q.dtype)}
    cfg = configs.choose(NAME, SPACE, problem, q.device)
    launch(
        _block_sparse_attention_fwd, (-(-seq_q // cfg["BLOCK_M"]), batch * heads), q, k, v, out, row_ptr, col_idx,
        _attention.qk_scale(dim, scale), seq_q, seq_k, heads, heads // kv_heads,
        0 if layout.heads == 1 else 1, row_ptr.stride(0), col_idx.stride(0),
        *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *out.stride()[:3],
        HEAD_DIM=dim, BLOCK_D=configs.pow2_at_least(max(dim, 16)), BLOCK=layout.block_size, CAUSAL=bool(causal),
        **cfg.launch_options(),
    )  # fmt: skip
    return out


def random_layout(heads: int, query_blocks: int, key_blocks: int, density: float, block_size: int, generator: torch.Generator, empty_rows: int = 0) -> BlockLayout:
    """A random CSR layout of about `density`, with the first `empty_rows` query blocks of each head empty."""
    mask = torch.rand(heads, query_blocks, key_blocks, generator=generator) < density
    mask[:, :empty_rows] = False
    return BlockLayout.from_block_mask(mask, block_size)


def make_inputs(case: Case, dtype: torch.dtype, device: Any, generator: torch.Generator) -> Inputs:
    p = dict(case.params)
    q, k, v = _attention.random_qkv(p, dtype, device, generator)
    size = p["block"]
    rows, cols = -(-p["seq_q"] // size), -(-p.get("seq_k", p["seq_q"]) // size)
    layout_heads = p.get("layout_heads", p["heads"])
    if torch.device(device).type == "meta":  # the AOT check: shapes only
        per_row = max(1, int(cols * p["density"]))
        layout = BlockLayout(
            torch.empty((layout_heads, rows + 1), dtype=torch.int32, device="meta"),
            torch.empty((layout_heads, rows * per_row), dtype=torch.int32, device="meta"), size, cols,
        )  # fmt: skip
    else:
        layout = random_layout(layout_heads, rows, cols, p["density"], size, generator, p.get("empty_rows", 0)).to(device)
    return Inputs(args=(q, k, v, layout), kwargs={"causal": p.get("causal", False)})


def _problem(case: Case, dtype: str) -> dict[str, Any]:
    return {"block": case.params["block"], "D": case.params["head_dim"], "dtype": dtype}


def _cost(case: Case, dtype: str) -> Cost:
    p = case.params
    seq_q, seq_k = p["seq_q"], p.get("seq_k", p["seq_q"])
    pairs = seq_q * seq_k * p["density"] * (0.5 if p.get("causal") else 1.0)
    flops = 4.0 * p["batch"] * p["heads"] * pairs * p["head_dim"]
    elements = p["batch"] * p["head_dim"] * (2 * p["heads"] * seq_q + 2 * p.get("kv_heads", p["heads"]) * seq_k * p["density"])
    return Cost(flops=flops, bytes=elements * (4 if dtype == "float32" else 2), bound="compute")


OPERATOR = Operator(
    name=NAME,
    summary="attention forward over a CSR block layout (row pointers + column indices), empty rows allowed",
    reference=reference,
    triton=block_sparse_attention,
    make_inputs=make_inputs,
    cases=(
        Case("csr-empty-rows", {"batch": 1, "heads": 2, "seq_q": 128, "head_dim": 32, "block": 16, "density": 0.4, "empty_rows": 2}),
        Case(
            "shared-layout-gqa-causal-subtiles",
            {"batch": 1, "heads": 4, "kv_heads": 2, "seq_q": 100, "head_dim": 64, "block": 32, "density": 0.6, "layout_heads": 1, "causal": True},
            config={NAME: {"BLOCK_M": 16, "BLOCK_N": 16, "num_warps": 4, "num_stages": 2}},
        ),
    ),
    device_cases=(Case("s4096-d128-b64-25pct", {"batch": 2, "heads": 16, "seq_q": 4096, "head_dim": 128, "block": 64, "density": 0.25}),),
    bench_cases=(Case("s8192-d128-b128-10pct", {"batch": 2, "heads": 32, "seq_q": 8192, "head_dim": 128, "block": 128, "density": 0.1}),),
    cost=_cost,
    torch_op=torch_op,
    torch_inputs=torch_inputs,
    config_space=SPACE,
    problem=_problem,
    tolerances={"float32": (1e-5, 1e-5), "float16": (2e-3, 2e-3), "bfloat16": (1.6e-2, 1.6e-2)},
)
