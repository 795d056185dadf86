"""Regression tests for the edge cases that crashed or answered wrong: empty batches, empty GEMMs, absent norm
parameters, out-of-range cross-entropy targets. Each runs the Triton implementation under the interpreter."""

from __future__ import annotations

import pytest
import torch

from accelport.kernels import KernelError, get


def _leaf(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape) + 1)).requires_grad_(True)


@pytest.mark.parametrize("name", ["rms_norm", "layer_norm"])
def test_an_empty_batch_runs_forward_and_backward_with_zero_parameter_gradients(name):
    """The backward divided the rows among programs: 0 rows was a ZeroDivisionError."""
    x, w = _leaf(0, 64), _leaf(64)
    args = (x, w) if name == "rms_norm" else (x, w, _leaf(64))
    y = get(name).triton(*args)
    assert y.shape == (0, 64)
    y.sum().backward()
    assert x.grad.shape == (0, 64)
    for p in args[1:]:
        assert p.grad is not None and torch.equal(p.grad, torch.zeros(64))


def test_a_batch_of_rows_with_no_columns_is_not_an_ambiguous_reshape():
    y = get("rms_norm").triton(torch.randn(3, 0), None)
    assert y.shape == (3, 0)


@pytest.mark.parametrize("m,k,n", [(4, 0, 5), (0, 8, 5), (0, 0, 5), (3, 6, 0)])
def test_gemm_with_an_empty_dimension_matches_torch_forward_and_backward(m, k, n):
    a, b = _leaf(m, k), _leaf(k, n)
    ra, rb = a.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
    out = get("gemm").triton(a, b)
    want = ra @ rb
    assert out.shape == want.shape and torch.equal(out, want)  # K = 0: zeros, as torch gives
    g = torch.ones_like(want)
    out.backward(g)
    want.backward(g)
    assert torch.equal(a.grad, ra.grad) and torch.equal(b.grad, rb.grad)


def test_rms_norm_without_weight_is_a_plain_normalisation_with_a_gradient():
    x = _leaf(5, 40)
    ref = x.detach().clone().requires_grad_()
    y = get("rms_norm").triton(x, None, 1e-5)
    want = torch.nn.functional.rms_norm(ref, (40,), None, 1e-5)
    torch.testing.assert_close(y, want)
    y.backward(torch.ones_like(y) * torch.arange(40.0))
    want.backward(torch.ones_like(want) * torch.arange(40.0))
    torch.testing.assert_close(x.grad, ref.grad)


def test_layer_norm_without_weight_or_bias_matches_torch():
    x = _leaf(4, 48) * 2 + 3
    x.retain_grad()
    ref = x.detach().clone().requires_grad_()
    y = get("layer_norm").triton(x, None, None, 1e-5)
    want = torch.nn.functional.layer_norm(ref, (48,), None, None, 1e-5)
    torch.testing.assert_close(y, want)
    g = torch.randn(4, 48, generator=torch.Generator().manual_seed(3))
    y.backward(g)
    want.backward(g)
    torch.testing.assert_close(x.grad, ref.grad, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["rms_norm", "layer_norm"])
def test_a_weight_of_the_wrong_width_is_a_kernel_error_not_an_interpreter_error(name):
    with pytest.raises(KernelError, match=r"weight/bias of shape \(8,\) does not fit x of shape \(2, 16\)"):
        get(name).triton(torch.randn(2, 16), torch.randn(8))


@pytest.mark.parametrize("bad", [10, -5, 99])
def test_an_out_of_range_target_raises_like_torch_instead_of_reading_the_next_row(bad):
    logits = torch.randn(3, 10)
    target = torch.tensor([1, bad, 2])
    with pytest.raises(IndexError, match=f"Target {bad} is out of bounds") as torch_error:
        torch.nn.functional.cross_entropy(logits, target)
    with pytest.raises(IndexError, match=f"Target {bad} is out of bounds") as ours:
        get("cross_entropy").triton(logits, target)
    assert isinstance(ours.value, KernelError) and str(ours.value) == str(torch_error.value)


def test_ignore_index_is_not_out_of_range():
    logits = torch.randn(3, 10)
    target = torch.tensor([1, -100, 9])
    torch.testing.assert_close(get("cross_entropy").triton(logits, target), torch.nn.functional.cross_entropy(logits, target))


def test_varlen_attention_matches_each_sequence_alone_forward_and_backward():
    from accelport.kernels import flash_attention as fa

    lengths_q, lengths_k = [5, 0, 12], [9, 3, 12]  # an empty query sequence, bottom-right decode rows
    gen = torch.Generator().manual_seed(5)
    q = torch.randn(sum(lengths_q), 4, 16, generator=gen).requires_grad_()
    k = torch.randn(sum(lengths_k), 2, 16, generator=gen).requires_grad_()
    v = torch.randn(sum(lengths_k), 2, 16, generator=gen).requires_grad_()
    cu_q = torch.tensor([0, 5, 5, 17])
    cu_k = torch.tensor([0, 9, 12, 24])
    out = fa.flash_attention_varlen(q, k, v, cu_q, cu_k, causal=True, bottom_right=True)
    g = torch.randn(out.shape, generator=gen)
    out.backward(g)
    refs = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    pieces = []
    for i in range(3):
        sq, sk = slice(int(cu_q[i]), int(cu_q[i + 1])), slice(int(cu_k[i]), int(cu_k[i + 1]))
        qi, ki, vi = (t[s].transpose(0, 1)[None] for t, s in zip(refs, (sq, sk, sk), strict=True))
        pieces.append(fa.reference(qi, ki, vi, causal=True, bottom_right=True)[0].transpose(0, 1))
    want = torch.cat(pieces)
    want.backward(g)
    torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)
    for got, expected in zip((q, k, v), refs, strict=True):
        torch.testing.assert_close(got.grad, expected.grad, atol=1e-5, rtol=1e-5)
    with pytest.raises(KernelError, match="cu_seqlens must start at 0"):
        fa.flash_attention_varlen(q, k, v, torch.tensor([0, 5]), cu_k)
