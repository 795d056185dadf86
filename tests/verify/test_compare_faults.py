"""Planted faults: `compare` fails and names the right first divergent op and module; a clean bf16 run passes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from numerics_helpers import buggy_relu, dump, tinylm, train_step

from accelport.verify.numerics.compare import compare_dumps


def bf16_step(model):
    train_step(model, autocast=torch.bfloat16)


@pytest.fixture(scope="module")
def ref(tmp_path_factory) -> Path:
    """fp32 reference: TinyLM with ReLU activations, one forward and backward, full tensors."""
    return dump(tmp_path_factory.mktemp("ref") / "ref", tinylm(relu=True), tensors=True)


@pytest.fixture(scope="module")
def ref_stats(tmp_path_factory) -> Path:
    return dump(tmp_path_factory.mktemp("ref") / "ref", tinylm(relu=True))


def first(ref: Path, test: Path, **options) -> tuple[bool, dict]:
    with compare_dumps(ref, test, **options) as result:
        data = result.to_dict()
    assert data["verdict"] in ("pass", "fail")
    return result.passed, data["first_divergence"]


@pytest.mark.parametrize("tensors", [False, True], ids=["statistics", "tensors"])
def test_identical_runs_pass(tmp_path, ref, ref_stats, tensors):
    test = dump(tmp_path / "same", tinylm(relu=True), tensors=tensors)
    passed, divergence = first(ref if tensors else ref_stats, test)
    assert passed and divergence is None


@pytest.mark.parametrize("tensors", [False, True], ids=["statistics", "tensors"])
def test_weight_changed_by_005_is_found_at_the_parameter(tmp_path, ref, ref_stats, tensors):
    model = tinylm(relu=True)
    with torch.no_grad():
        model.blocks[0].mlp[2].weight[3, 5] += (
            0.05  # an element inside the range: min/max do not move
        )
    test = dump(tmp_path / "weight", model, tensors=tensors)
    passed, divergence = first(ref if tensors else ref_stats, test)
    assert not passed
    assert divergence["kind"] == "param"
    assert divergence["module"] == "TinyLM.blocks.0.mlp.2"
    assert divergence["op"] == "param:weight"
    assert divergence["cause"] == "parameter differs"


@pytest.mark.parametrize("tensors", [False, True], ids=["statistics", "tensors"])
def test_relu_scaled_by_101_is_found_at_the_relu(tmp_path, ref, ref_stats, tensors):
    with buggy_relu(1.01):
        test = dump(tmp_path / "relu", tinylm(relu=True), tensors=tensors)
    passed, divergence = first(ref if tensors else ref_stats, test)
    assert not passed
    assert (divergence["op"], divergence["module"]) == (
        "aten.relu.default",
        "TinyLM.blocks.0.mlp.1",
    )
    assert divergence["phase"] == "forward" and divergence["call_index"] == 0
    assert divergence["source_line"].endswith(".py:56") or "model.py" in divergence["source_line"]
    if tensors:
        # Replay: the op itself is wrong (a correct ReLU is exact), not drift.
        assert divergence["replay"]["status"] == "done" and divergence["replay"]["verdict"] == "op"


@pytest.mark.parametrize("tensors", [False, True], ids=["statistics", "tensors"])
def test_layernorm_with_another_eps_is_found_with_its_arguments(tmp_path, ref, ref_stats, tensors):
    model = tinylm(relu=True)
    model.blocks[0].ln2.eps = 1e-2
    test = dump(tmp_path / "eps", model, tensors=tensors)
    passed, divergence = first(ref if tensors else ref_stats, test)
    assert not passed
    assert (divergence["op"], divergence["module"]) == (
        "aten.native_layer_norm.default",
        "TinyLM.blocks.0.ln2",
    )
    assert divergence["args_ref"]["a"][-1] == pytest.approx(1e-5)
    assert divergence["args_test"]["a"][-1] == pytest.approx(1e-2)
    if tensors:
        assert divergence["replay"]["verdict"] == "op"


def test_dropout_left_on_in_eval_is_found_at_the_dropout(tmp_path, ref_stats):
    model = tinylm(relu=True)
    model.blocks[0].attn.dropout.train()  # the one module a migration forgot to switch to eval
    test = dump(tmp_path / "dropout", model)
    passed, divergence = first(ref_stats, test)
    assert not passed
    assert divergence["module"] == "TinyLM.blocks.0.attn.dropout"
    assert "bernoulli" in divergence["op"] or "dropout" in divergence["op"]
    assert divergence["status"] == "only_test"
    assert divergence["first_failing_record"]["module"].startswith("TinyLM.blocks.0.attn")


@pytest.mark.parametrize("tensors", [False, True], ids=["statistics", "tensors"])
def test_bf16_autocast_run_passes_against_fp32(tmp_path, ref, ref_stats, tensors):
    test = dump(tmp_path / "bf16", tinylm(relu=True), step=bf16_step, tensors=tensors)
    with compare_dumps(ref if tensors else ref_stats, test) as result:
        data = result.to_dict()
        compared_bf16 = [
            r
            for r in result.rows()
            if r.get("dtype_test") == "bfloat16" and r.get("dtype_ref") == "float32"
        ]
    assert result.passed, data["reasons"]
    assert data["options"]["autocast"]["test"] == ["bfloat16"]
    # bf16 outputs were compared with fp32 ones after upcasting, never flagged as a dtype error.
    assert len(compared_bf16) > 20 and all(r["status"] in ("pass", "drift") for r in compared_bf16)
    # The casts autocast inserts are recognised as casts.
    assert (
        data["counts"]["only_test"] > 0
        and data["counts"]["benign_extra"] >= data["counts"]["only_test"]
    )


def test_bf16_run_with_a_changed_weight_fails(tmp_path, ref_stats):
    model = tinylm(relu=True)
    with torch.no_grad():
        model.blocks[1].attn.proj.weight[7, 2] -= 0.05
    test = dump(tmp_path / "bf16w", model, step=bf16_step)
    passed, divergence = first(ref_stats, test)
    assert not passed
    assert (divergence["module"], divergence["op"]) == ("TinyLM.blocks.1.attn.proj", "param:weight")


def test_bf16_relu_bug_smaller_than_the_tolerance_is_found_by_replaying_every_op(tmp_path, ref):
    """1% is inside bf16's tolerance; replaying each op against a correct CPU kernel still finds it."""
    with buggy_relu(1.01):
        test = dump(tmp_path / "bf16relu", tinylm(relu=True), step=bf16_step, tensors=True)
    passed, divergence = first(ref, test, replay="all")
    assert not passed
    assert (divergence["op"], divergence["module"]) == (
        "aten.relu.default",
        "TinyLM.blocks.0.mlp.1",
    )
    assert divergence["cause"].startswith("op-local replay")


def test_drift_is_shown_and_counted_and_fails_only_when_asked(tmp_path, ref, cli):
    """bf16 against fp32 with full tensors: some records exceed the tolerance and replay calls them drift."""
    import json

    test = dump(tmp_path / "bf16", tinylm(relu=True), step=bf16_step, tensors=True)
    default = cli("compare", ref, test)
    assert default.code == 0, default.out
    summary = default.out.splitlines()
    verdict = summary[0]
    words = verdict.split()
    assert words[:3] == ["verdict:", "PASS", "with"] and words[4] == "DRIFT"
    drifted = int(words[3])
    assert drifted > 0
    assert any(line.startswith(f"DRIFT: {drifted} records beyond tolerance") and "does not fail" in line for line in summary)
    assert any(line.startswith("  first drift: aten.") for line in summary)
    data = json.loads(cli("compare", ref, test, "--format", "json").out)
    assert data["drift"]["count"] == drifted == data["counts"]["drift"] and data["drift"]["fails"] is False
    assert data["drift"]["first"]["op"].startswith("aten.")
    strict = cli("compare", ref, test, "--fail-on-drift", "--format", "json")
    assert strict.code == 1
    strict_data = json.loads(strict.out)
    assert strict_data["verdict"] == "fail" and strict_data["drift"]["fails"] is True
    assert any("explained by replay as accumulated drift (--fail-on-drift)" in r for r in strict_data["reasons"])
    # A pair without drift passes --fail-on-drift.
    assert cli("compare", ref, ref, "--fail-on-drift").code == 0
