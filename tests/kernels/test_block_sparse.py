"""Block-sparse attention over CSR layouts equals dense attention with the same block mask."""

from __future__ import annotations

import pytest
import torch

from accelport.kernels import KernelError
from accelport.kernels.block_sparse_attention import (
    BlockLayout,
    block_sparse_attention,
    random_layout,
    token_mask,
)


def _qkv(heads=2, kv_heads=2, seq=64, dim=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, heads, seq, dim, generator=g)
    k = torch.randn(1, kv_heads, seq, dim, generator=g)
    v = torch.randn(1, kv_heads, seq, dim, generator=g)
    return q, k, v


def _dense(q, k, v, layout, causal=False):
    """PyTorch's own dense attention with the layout's token mask (fully masked rows give zeros)."""
    mask = token_mask(layout, q.shape[2], k.shape[2], causal).unsqueeze(0)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)


@pytest.mark.parametrize(("seed", "density", "empty_rows", "causal"), [(1, 0.3, 1, False), (2, 0.7, 2, True), (3, 0.0, 0, False), (4, 1.0, 0, True)])
def test_random_csr_layouts_equal_dense_attention(seed, density, empty_rows, causal):
    q, k, v = _qkv(seed=seed, seq=60)  # 60 tokens: the last block is ragged
    layout = random_layout(2, 4, 4, density, 16, torch.Generator().manual_seed(seed), empty_rows=empty_rows)
    counts = layout.row_ptr[:, 1:] - layout.row_ptr[:, :-1]
    assert (counts[:, :empty_rows] == 0).all()
    got = block_sparse_attention(q, k, v, layout, causal=causal)
    want = _dense(q, k, v, layout, causal)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    if empty_rows or density == 0.0:
        rows = 16 * max(empty_rows, 4 if density == 0.0 else 0)
        assert got[:, :, :rows].abs().max() == 0  # an empty row attends to nothing: zeros


def test_shared_layout_serves_every_head_with_gqa():
    q, k, v = _qkv(heads=4, kv_heads=2, seq=64, seed=5)
    mask = torch.tensor([[1, 0, 0, 1], [0, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 1]], dtype=torch.bool)
    layout = BlockLayout.from_block_mask(mask, 16)
    assert layout.heads == 1
    torch.testing.assert_close(block_sparse_attention(q, k, v, layout), _dense(q, k, v, layout), atol=1e-5, rtol=1e-5)


def test_block_mask_converter_round_trips():
    mask = torch.rand(3, 5, 7, generator=torch.Generator().manual_seed(0)) < 0.4
    mask[1, 2] = False  # an empty row
    layout = BlockLayout.from_block_mask(mask, 32)
    assert layout.row_ptr.dtype == torch.int32 and layout.col_idx.dtype == torch.int32
    assert layout.row_ptr.shape == (3, 6) and int(layout.row_ptr[1, 3] - layout.row_ptr[1, 2]) == 0
    assert torch.equal(layout.block_mask(), mask)
    assert layout.nnz() == int(mask.sum())


def test_topk_per_query_block_matches_its_block_mask():
    indices = torch.tensor([[[2, 0, -1], [-1, -1, -1], [1, 1, 3], [3, 2, 0]]])  # duplicates, -1 slots, an empty row
    layout = BlockLayout.from_topk(indices, key_blocks=4, block_size=16)
    expected = torch.tensor([[[1, 0, 1, 0], [0, 0, 0, 0], [0, 1, 0, 1], [1, 0, 1, 1]]], dtype=torch.bool)
    assert torch.equal(layout.block_mask(), expected)
    q, k, v = _qkv(heads=1, kv_heads=1, seq=64, seed=7)
    torch.testing.assert_close(block_sparse_attention(q, k, v, layout), _dense(q, k, v, layout), atol=1e-5, rtol=1e-5)


def test_topk_per_query_token_takes_the_union_of_a_block_rows_tokens():
    per_token = torch.full((40, 2), -1)
    per_token[0] = torch.tensor([0, -1])
    per_token[5] = torch.tensor([2, 1])  # same block row as token 0 (block 16)
    per_token[20] = torch.tensor([1, 1])
    layout = BlockLayout.from_topk(per_token, key_blocks=3, block_size=16, per_token=True)
    assert layout.query_blocks == 3
    assert torch.equal(layout.block_mask()[0], torch.tensor([[1, 1, 1], [0, 1, 0], [0, 0, 0]], dtype=torch.bool))


def test_bad_layouts_are_clear_errors():
    q, k, v = _qkv(seq=64)
    with pytest.raises(KernelError, match="4x4 blocks"):
        block_sparse_attention(q, k, v, BlockLayout.from_block_mask(torch.ones(3, 3, dtype=torch.bool), 16))
    with pytest.raises(KernelError, match="power of two"):
        block_sparse_attention(q, k, v, BlockLayout.from_block_mask(torch.ones(6, 6, dtype=torch.bool), 12))
    with pytest.raises(KernelError, match=r"-1 or in \[0, 4\)"):
        BlockLayout.from_topk(torch.tensor([[4]]), key_blocks=4, block_size=16)
    with pytest.raises(KernelError, match="forward-only"):
        block_sparse_attention(q.requires_grad_(), k, v, BlockLayout.from_block_mask(torch.ones(4, 4, dtype=torch.bool), 16))


@pytest.mark.parametrize("causal", [False, True])
def test_benchmark_baseline_builds_its_dense_mask_once_outside_the_timed_call(monkeypatch, causal):
    import dataclasses

    from accelport.kernels import bench, get
    from accelport.kernels import block_sparse_attention as module

    op = get("block_sparse_attention")
    case = op.cases[0]
    inputs = op.make_inputs(case, torch.float32, "cpu", torch.Generator().manual_seed(3))
    prepared = op.torch_inputs(_with_causal(inputs, causal))
    q, k, v, layout = inputs.args
    assert isinstance(prepared.args[3], torch.Tensor) and prepared.kwargs == {}
    want = op.torch_op(q, k, v, layout, causal=causal)
    torch.testing.assert_close(op.torch_op(*prepared.args, **prepared.kwargs), want)
    torch.testing.assert_close(want, op.reference(q, k, v, layout, causal=causal), atol=1e-5, rtol=1e-5)
    # A tensor mask handed over with causal=True is still causally masked.
    plain = token_mask(layout, q.shape[2], k.shape[2], False).unsqueeze(0)
    torch.testing.assert_close(op.torch_op(q, k, v, plain, causal=causal), want)

    built = []
    real = module.token_mask
    monkeypatch.setattr(module, "token_mask", lambda *a, **kw: built.append(1) or real(*a, **kw))
    # Our side of the benchmark (the reference on CPU) builds masks too; leave only PyTorch's side counting.
    baseline_only = dataclasses.replace(op, reference=lambda q, *args, **kwargs: q.clone())
    row = bench.bench_case(baseline_only, case, "float32", "cpu")
    assert row.torch_ms > 0 and len(built) == 1  # once, before timing; the timed calls (6 or more) reuse it


def _with_causal(inputs, causal):
    from accelport.kernels.registry import Inputs

    return Inputs(args=inputs.args, kwargs={**inputs.kwargs, "causal": causal}, grad=inputs.grad)
