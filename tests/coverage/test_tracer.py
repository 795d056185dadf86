"""The tracer: meta tracing is faithful to a real CPU run; fallbacks, fast paths and attribution."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from accelport.coverage import trace
from accelport.coverage.records import canonical
from accelport.coverage.workload import load_factory
from accelport.errors import UserError

# How the CPU runs scaled_dot_product_attention: kernels an accelerator never runs, one SDPA call each.
CPU_ATTENTION = {"_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention_for_cpu_backward"}


def _real_cpu_step_ops(factory) -> set[str]:
    """The overloads a real CPU training step runs, seen by a bare TorchDispatchMode (not the tracer under test)."""
    seen: set[str] = set()

    class Plain(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.namespace == "aten":
                name = func._schema.name.split("::", 1)[1]
                seen.add(name if func._overloadname == "default" else f"{name}.{func._overloadname}")
            return func(*args, **(kwargs or {}))

    model, inputs, loss_fn, targets = factory()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    state = torch.get_rng_state()
    with Plain():
        loss_fn(model(*inputs), targets).backward()
        optimizer.step()
    torch.set_rng_state(state)
    return seen


def test_meta_trace_equals_real_cpu_run_of_the_same_step(lm_meta, model_spec):
    """Acceptance: the normalised op set of a meta trace equals what a real CPU step of a tiny LM runs."""
    assert lm_meta.strategy == "meta" and lm_meta.device == "meta"
    real = _real_cpu_step_ops(load_factory(model_spec("tiny_lm")))
    # The CPU ran attention with its own kernels; fold them into the call the model made.
    assert real >= CPU_ATTENTION
    real = (real - CPU_ATTENTION) | {"scaled_dot_product_attention"}
    assert lm_meta.normalised_ops() == real
    # The whole step is there: forward, backward and the optimizer.
    ops = lm_meta.normalised_ops()
    assert {"embedding", "native_layer_norm", "gelu", "nll_loss_forward"} <= ops
    assert {"embedding_dense_backward", "native_layer_norm_backward", "gelu_backward", "nll_loss_backward"} <= ops
    assert any(op.startswith("_foreach_") for op in ops)


def test_the_cpu_tracer_folds_cpu_only_attention_kernels(lm_meta, lm_cpu):
    assert lm_cpu.strategy == "cpu" and lm_cpu.device == "cpu"
    assert lm_meta.normalised_ops() == lm_cpu.normalised_ops()
    cpu_inside = {r.op for r in lm_cpu.folded()}
    meta_inside = {r.op for r in lm_meta.folded()}
    assert cpu_inside >= CPU_ATTENTION and not CPU_ATTENTION & lm_cpu.normalised_ops()
    assert "_safe_softmax" in meta_inside and "_scaled_dot_product_flash_attention_for_cpu" not in meta_inside
    assert "scaled_dot_product_attention" in lm_meta.normalised_ops()


def test_meta_trace_of_the_example_model_equals_a_plain_cpu_run(example_case):
    """The recorder sees what a bare TorchDispatchMode sees on a real CPU step of TinyLM."""
    meta = trace(f"{example_case}:factory", strategy="meta")

    seen: set[str] = set()

    class Plain(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.namespace == "aten":
                seen.add(canonical(func))
            return func(*args, **(kwargs or {}))

    model, inputs, loss_fn, targets = load_factory(f"{example_case}:factory")()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    state = torch.get_rng_state()
    with Plain():
        loss_fn(model(*inputs), targets).backward()
        optimizer.step()
    torch.set_rng_state(state)
    assert meta.normalised_ops() == seen
    assert {r.op for r in meta.host()} == {"_local_scalar_dense", "lift_fresh", "_foreach_add_.Tensor"}


def test_inference_takes_the_fused_fast_path_an_accelerator_takes(encoder_trace):
    assert encoder_trace.mode == "infer"  # the model is in eval mode
    assert encoder_trace.strategy == "fake"  # meta would fail the fast path's device check
    records = {r.op: r for r in encoder_trace.judged()}
    assert "_transformer_encoder_layer_fwd" in records
    assert "native_layer_norm" not in records  # the slow path did not run
    sites = records["_transformer_encoder_layer_fwd"].sites
    modules = {site.module for site in sites}
    assert modules == {"encoder.layers.0 (TransformerEncoderLayer)", "encoder.layers.1 (TransformerEncoderLayer)"}
    assert all(site.location.endswith("coverage_models.py:74") for site in sites)  # Encoder.forward


def test_boolean_mask_indexing_falls_back_to_fake_tensors_and_says_so(model_spec):
    traced = trace(model_spec("masked"))
    assert traced.strategy == "fake"
    first = traced.attempts[0]
    assert first.strategy == "meta" and not first.ok and "nonzero" in first.reason
    assert traced.attempts[1].strategy == "fake" and traced.attempts[1].ok
    assert "after meta device failed" in traced.describe_strategy()
    assert {"index.Tensor", "gt.Scalar", "index_put"} <= traced.normalised_ops()


def test_a_branch_on_item_falls_back_to_a_real_cpu_run(model_spec):
    traced = trace(model_spec("branch_on_item"))
    assert [(a.strategy, a.ok) for a in traced.attempts] == [("meta", False), ("fake", False), ("cpu", True)]
    assert "relu" in traced.normalised_ops()


def test_backward_and_optimizer_calls_are_attributed(lm_meta):
    records = {r.op: r for r in lm_meta.judged()}
    backward = records["native_layer_norm_backward"]
    assert set(backward.phases) == {"backward"}
    assert {site.module for site in backward.sites} >= {"blocks.0.ln1 (LayerNorm)", "ln (LayerNorm)"}
    assert all("coverage_models.py:" in site.location for site in backward.sites)
    embedding = records["embedding_dense_backward"].first_site
    assert embedding.module == "emb (Embedding)" and embedding.phase == "backward"
    optimizer = records["_foreach_mul_.Scalar"].first_site
    assert optimizer.phase == "optimizer" and optimizer.module == "AdamW"
    assert records["embedding"].dtypes == ["float32,int64"]


def test_an_optimizer_without_foreach_is_traced_as_accelerators_run_it(model_spec):
    traced = trace(model_spec("plain_adam"), strategy="meta")
    assert any(op.startswith("_foreach_") for op in traced.normalised_ops())
    assert any("Adam: traced with foreach=True" in note for note in traced.notes)
    assert not any(op == "addcdiv_" for op in traced.normalised_ops())  # not the per-tensor loop


def test_host_work_is_not_judged(lm_meta):
    judged = {r.op for r in lm_meta.judged()}
    host = {r.op for r in lm_meta.host()}
    assert "_local_scalar_dense" in host and "_local_scalar_dense" not in judged


def test_tracing_leaves_the_callers_random_state_alone(model_spec):
    before = torch.get_rng_state()
    trace(model_spec("tiny_lm"), strategy="cpu")
    assert torch.equal(before, torch.get_rng_state())


def test_dotted_module_spec(monkeypatch, models_file):
    monkeypatch.syspath_prepend(str(models_file.parent))
    traced = trace("coverage_models:masked", strategy="fake")
    assert "gt.Scalar" in traced.normalised_ops()


@pytest.mark.parametrize(
    ("factory", "message"),
    [
        ("no/such/file.py:f", "no such file"),
        ("{models}:missing", "has no attribute"),
        ("{models}:not_a_workload", "returned int"),
        ("not_a_spec", "expected MODULE:FACTORY"),
        ("no_such_module_xyz:f", "cannot import module"),
    ],
)
def test_bad_factories_are_user_errors(factory, message, models_file):
    with pytest.raises(UserError, match=message):
        trace(factory.format(models=models_file))


def test_a_step_function_under_autocast_is_traced_and_the_gap_said(model_spec):
    traced = trace(model_spec("amp_step"))
    assert traced.mode == "train" and traced.strategy == "meta" and traced.model == ""
    phases = {phase for r in traced.judged() for phase in r.phases}
    assert phases == {"forward", "backward", "optimizer"}
    assert any(op.startswith("_foreach_") for op in traced.normalised_ops())  # SGD switched to foreach
    assert any("autocast does not act on meta tensors" in note for note in traced.notes)
    real = trace(model_spec("amp_step"), strategy="cpu")
    assert "_to_copy" in real.normalised_ops() - traced.normalised_ops()  # what the note warns about


def test_tracing_with_the_fast_paths_off_runs_the_unfused_ops_and_restores_the_switch(model_spec):
    import torch

    from accelport.coverage.tracer import takes_fastpath

    assert [takes_fastpath(d) for d in ("cpu", "cuda", "xpu", "npu", "musa", "mps")] == [True] * 5 + [False]
    assert torch.backends.mha.get_fastpath_enabled()
    unfused = trace(model_spec("encoder_eval"), fastpath=False)
    assert torch.backends.mha.get_fastpath_enabled()  # the user's setting is back
    ops = {r.op for r in unfused.judged()}
    assert "_transformer_encoder_layer_fwd" not in ops and "native_layer_norm" in ops
    assert any("fast paths off" in note for note in unfused.notes)
