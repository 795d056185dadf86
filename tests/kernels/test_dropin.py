"""Drop-in integration: an HF-style Llama model trains through `patch()` and through `enable()` on CPU, under the
Triton interpreter, with gradients that match plain PyTorch within the documented per-dtype tolerances."""

from __future__ import annotations

import pytest
import torch

from accelport import kernels
from accelport.kernels import aten, patching
from accelport.kernels.registry import KernelError

from . import llama_block

# Model-level tolerances (docs/kernels.md, "Drop-in integration"): |got - want| <= TOL * max |want| per tensor.
TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 6e-2}


def _ids(batch: int = 2, seq: int = 9, vocab: int = 64) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(7))


def _grads(model: torch.nn.Module, ids: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    loss = llama_block.loss_of(model, ids)
    loss.backward()
    return loss.detach(), {n: p.grad.detach().clone() for n, p in model.named_parameters()}


def _assert_close(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor], dtype: torch.dtype) -> None:
    assert got.keys() == want.keys()
    for name in want:
        assert got[name] is not None, name
        scale = want[name].float().abs().max().clamp_min(1e-12)
        err = (got[name].float() - want[name].float()).abs().max()
        assert err <= TOLERANCE[dtype] * scale, f"{name}: max |err| {float(err):.3g} vs max |want| {float(scale):.3g}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_patched_llama_block_trains_with_torch_gradients(dtype):
    model = llama_block.build(dtype=dtype)
    ids = _ids()
    want_loss, want = _grads(model, ids)
    keys = list(model.state_dict())
    handle = kernels.patch(model)
    replaced = {e.path: e.detail for e in handle.replaced}
    assert set(replaced) == {
        "layers.0.self_attn", "layers.0.mlp", "layers.0.input_layernorm", "layers.0.post_attention_layernorm", "norm",
    }  # fmt: skip
    kept = {e.path: e.detail for e in handle.entries if not e.replaced}
    assert "cos/sin tables" in kept["rotary_emb"]
    assert list(model.state_dict()) == keys  # same parameters under the same names
    assert isinstance(model.layers[0].mlp, patching.KernelSwiGLUMLP)
    got_loss, got = _grads(model, ids)
    torch.testing.assert_close(got_loss, want_loss, atol=TOLERANCE[dtype], rtol=TOLERANCE[dtype])
    _assert_close(got, want, dtype)
    assert not model.layers[0].self_attn.fallbacks  # the kernels ran, not the original attention
    handle.undo()
    assert isinstance(model.layers[0].mlp, llama_block.LlamaMLP) and not hasattr(model, patching.HANDLE_ATTRIBUTE)
    assert list(model.state_dict()) == keys


def test_patch_runs_the_kernels_a_planted_fault_shows_in_the_loss(monkeypatch):
    """The patched modules call the Triton kernels: break the SwiGLU kernel and the loss moves."""
    model = llama_block.build()
    ids = _ids()
    with torch.no_grad():
        want = llama_block.loss_of(model, ids)
        kernels.patch(model)
        from accelport.kernels import swiglu

        monkeypatch.setattr(swiglu.GLU, "forward", staticmethod(lambda ctx, gate, up, act: gate * up))  # silu dropped
        got = llama_block.loss_of(model, ids)
    kernels.unpatch(model)
    assert abs(float(got) - float(want)) > 1e-3


def test_patched_attention_falls_back_for_a_mask_and_counts_it():
    model = llama_block.build()
    ids = _ids(batch=1, seq=5)
    mask = torch.ones(5, 5, dtype=torch.bool).tril()
    with torch.no_grad():
        want = model(ids, mask)
        kernels.patch(model)
        got = model(ids, mask)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    assert model.layers[0].self_attn.fallbacks == {"attention_mask": 1}
    assert "fallbacks in KernelAttention: {'attention_mask': 1}" in model._accelport_patch.report()
    kernels.unpatch(model)


def test_patch_reports_what_it_does_not_replace_and_why():
    model = torch.nn.Sequential(torch.nn.LayerNorm([4, 8]), torch.nn.LayerNorm(8, bias=False), torch.nn.RMSNorm(8))
    handle = kernels.patch(model)
    entries = {e.path: e for e in handle.entries}
    assert not entries["0"].replaced and "last dimension only" in entries["0"].detail
    assert entries["1"].replaced and entries["2"].replaced
    x = torch.randn(3, 8, requires_grad=True)
    y = model[2](model[1](x))
    want = torch.nn.functional.rms_norm(torch.nn.functional.layer_norm(x, (8,), model[1].weight), (8,), model[2].weight)
    torch.testing.assert_close(y, want)
    with pytest.raises(KernelError, match="already patched"):
        kernels.patch(model)
    handle.undo()
    assert isinstance(model[1], torch.nn.LayerNorm)


def test_enabled_llama_block_trains_with_torch_gradients_and_logs_the_takeover():
    model = llama_block.build()
    ids = _ids()
    want_loss, want = _grads(model, ids)
    with kernels.enable(device="cpu") as takeover:
        got_loss, got = _grads(model, ids)
    assert not takeover.active and aten.active() is None
    torch.testing.assert_close(got_loss, want_loss, atol=1e-4, rtol=1e-4)
    _assert_close(got, want, torch.float32)
    calls = {t.aten: t.calls for t in takeover.takeovers}
    # The block's linears (mm in forward and backward), SDPA, the loss and softmax's pieces went through the kernels.
    for name in ("aten::mm", "aten::scaled_dot_product_attention", "aten::cross_entropy_loss"):
        assert calls[name] > 0, takeover.report()
    assert "aten::mm [CPU] <- gemm (triton)" in takeover.report()
    # disable() restored the original kernels: no more calls are counted.
    before = dict(calls)
    _grads(model, ids)
    assert {t.aten: t.calls for t in takeover.takeovers} == before


def test_enable_falls_back_for_what_the_kernels_do_not_cover():
    x = torch.randn(4, 6, dtype=torch.float64)
    with kernels.enable(["gemm", "cross_entropy", "flash_attention"], device="cpu") as takeover:
        torch.testing.assert_close(x @ x.t(), (x.float() @ x.float().t()).double())
        logits, target = torch.randn(4, 5), torch.tensor([0, 1, 2, 3])
        torch.nn.functional.cross_entropy(logits, torch.softmax(torch.randn(4, 5), -1))  # class probabilities
        weights = torch.rand(5) + 0.5
        got = torch.nn.functional.cross_entropy(logits, target, weight=weights, label_smoothing=0.1)
        q = torch.randn(1, 2, 4, 8)
        torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=torch.ones(4, 4, dtype=torch.bool))
    torch.testing.assert_close(got, torch.nn.functional.cross_entropy(logits, target, weight=weights, label_smoothing=0.1))
    fallbacks = {t.aten: t.fallbacks for t in takeover.takeovers}
    calls = {t.aten: t.calls for t in takeover.takeovers}
    assert fallbacks["aten::mm"] == {"dtype float64": 1}
    assert fallbacks["aten::cross_entropy_loss"] == {"class probabilities as target": 1}
    assert calls["aten::cross_entropy_loss"] == 1  # class weights and label smoothing: the kernel's own
    assert fallbacks["aten::scaled_dot_product_attention"] == {"attn_mask": 1}


def test_enable_takes_over_softmax_and_layer_norm_with_their_backward_kernels():
    x = torch.randn(3, 4, 10, requires_grad=True)
    w, b = torch.randn(10, requires_grad=True), torch.randn(10, requires_grad=True)
    ref = [t.detach().clone().requires_grad_() for t in (x, w, b)]
    with kernels.enable(["softmax", "layer_norm"], device="cpu") as takeover:
        y = torch.softmax(torch.nn.functional.layer_norm(x, (10,), w, b), dim=1)  # softmax over a middle dim
        y.backward(torch.arange(120.0).view(3, 4, 10) / 100)
    want = torch.softmax(torch.nn.functional.layer_norm(ref[0], (10,), ref[1], ref[2]), dim=1)
    want.backward(torch.arange(120.0).view(3, 4, 10) / 100)
    torch.testing.assert_close(y, want)
    for got, expected in zip((x, w, b), ref, strict=True):
        torch.testing.assert_close(got.grad, expected.grad, atol=1e-5, rtol=1e-5)
    assert all(t.calls == 1 for t in takeover.takeovers), takeover.report()


def test_enable_rejects_unknown_groups_and_cpu_needs_the_interpreter(monkeypatch):
    with pytest.raises(KernelError, match="no ATen takeover for conv"):
        kernels.enable(["conv"], device="cpu")
    from accelport.kernels import tl_compat

    monkeypatch.setattr(tl_compat, "INTERPRETING", False)
    with pytest.raises(KernelError, match="TRITON_INTERPRET=1"):
        kernels.enable(["softmax"], device="cpu")
    assert aten.active() is None


def test_enable_runs_the_kernels_a_planted_fault_shows_in_the_result(monkeypatch):
    from accelport.kernels import gemm

    a, b = torch.randn(5, 7), torch.randn(7, 3)
    with kernels.enable(["gemm"], device="cpu"):
        torch.testing.assert_close(a @ b, a.double().mm(b.double()).float(), atol=1e-5, rtol=1e-5)
        monkeypatch.setattr(gemm, "matmul", lambda x, y: torch.zeros(x.shape[0], y.shape[1]))
        assert torch.equal(a @ b, torch.zeros(5, 3))
    monkeypatch.undo()
    assert not torch.equal(a @ b, torch.zeros(5, 3))  # disabled: torch's own mm again


def test_enable_takes_over_log_softmax_and_patch_fuses_a_geglu_mlp():
    x = torch.randn(3, 50, requires_grad=True)
    ref = x.detach().clone().requires_grad_()
    with kernels.enable(["log_softmax"], device="cpu") as takeover:
        y = torch.log_softmax(x, dim=-1)
        y.backward(torch.ones_like(y) * torch.arange(50.0) / 50)
    want = torch.log_softmax(ref, dim=-1)
    want.backward(torch.ones_like(want) * torch.arange(50.0) / 50)
    torch.testing.assert_close(y, want)
    torch.testing.assert_close(x.grad, ref.grad, atol=1e-5, rtol=1e-5)
    assert [t.calls for t in takeover.takeovers] == [1, 1]
    model = llama_block.build()
    for layer in model.layers:
        layer.mlp.act_fn = torch.nn.GELU(approximate="tanh")  # a Gemma-style MLP
    ids = _ids()
    want_loss, want_grads = _grads(model, ids)
    handle = kernels.patch(model)
    assert "geglu (triton) between the projections" in {e.path: e.detail for e in handle.entries}["layers.0.mlp"]
    got_loss, got_grads = _grads(model, ids)
    handle.undo()
    torch.testing.assert_close(got_loss, want_loss, atol=1e-4, rtol=1e-4)
    _assert_close(got_grads, want_grads, torch.float32)
