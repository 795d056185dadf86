"""Offline judgement: native, via .out, composite (through what it calls), unknown, missing."""

from __future__ import annotations

import pytest

from accelport.coverage import Status, check
from accelport.coverage.check import ListSource, judge
from accelport.coverage.oplists import OpList, aten_facts, oplist_for


def _list(ops: set[str], complete: bool = True) -> OpList:
    return OpList(
        vendor="npu",
        backend="test",
        version="0",
        torch_version="",
        dispatch_key="PrivateUse1",
        complete=complete,
        unlisted="",
        source="test",
        licence="",
        origin="test",
        ops=frozenset(ops),
    )


def _verdicts(trace, ops: set[str], complete: bool = True) -> dict:
    return {v.op: v for v in judge(trace, ListSource(_list(ops, complete), aten_facts()))}


def test_encoder_fast_path_is_missing_on_npu_with_the_module_that_called_it(encoder_trace):
    report = check(encoder_trace, ["npu"])
    npu = report.targets[0]
    missing = npu.by_status(Status.MISSING)
    assert [v.op for v in missing] == ["_transformer_encoder_layer_fwd"]
    verdict = missing[0]
    assert verdict.record.calls == 2
    assert verdict.record.first_site.module == "encoder.layers.0 (TransformerEncoderLayer)"
    assert "set_fastpath_enabled(False)" in verdict.advice
    assert report.failed and npu.failed
    data = report.to_dict()["targets"][0]["ops"]
    row = next(op for op in data if op["op"] == "_transformer_encoder_layer_fwd")
    assert row["status"] == "missing" and row["share"] == pytest.approx(2 / 3, abs=1e-3)
    assert {s["module"] for s in row["sites"]} == {"encoder.layers.0 (TransformerEncoderLayer)", "encoder.layers.1 (TransformerEncoderLayer)"}
    # musa lists the fused kernel: nothing missing there.
    assert not check(encoder_trace, ["musa"]).failed


def test_the_tiny_lm_step_is_covered_on_npu(lm_meta):
    npu = check(lm_meta, ["npu"]).targets[0]
    assert not npu.failed
    statuses = {v.op: v.status for v in npu.verdicts}
    assert statuses["gelu"] is Status.DELEGATE  # torch_npu lists only gelu.out
    assert statuses["mm"] is Status.NATIVE


def test_structured_op_is_missing_when_its_out_kernel_is(lm_meta):
    everything = oplist_for("npu").ops
    verdicts = _verdicts(lm_meta, set(everything) - {"gelu.out"})
    assert verdicts["gelu"].status is Status.MISSING
    assert verdicts["gelu"].via == ["gelu.out"]


def test_composite_explicit_op_is_judged_by_what_its_kernel_calls(lm_meta):
    everything = set(oplist_for("npu").ops)
    covered = _verdicts(lm_meta, everything - {"zeros_like"})
    assert covered["zeros_like"].status is Status.COMPOSITE
    assert covered["zeros_like"].via == ["empty_like", "zero_"]
    # Planted fault: the backend lacks zero_, so zeros_like's composite kernel cannot run.
    broken = _verdicts(lm_meta, everything - {"zeros_like", "zero_"})
    assert broken["zeros_like"].status is Status.MISSING
    assert "zero_" in broken["zeros_like"].detail


def test_missing_op_shows_torch_decomposition_and_how_its_parts_fare(lm_meta):
    everything = set(oplist_for("npu").ops)
    verdicts = _verdicts(lm_meta, everything - {"gelu_backward", "gelu_backward.grad_input"})
    verdict = verdicts["gelu_backward"]
    assert verdict.status is Status.MISSING
    parts = dict(verdict.decomposition)
    assert "erf" in parts and all(status.ok for status in parts.values())


def test_a_partial_list_says_unknown_not_missing(lm_meta):
    verdicts = _verdicts(lm_meta, {"mm"}, complete=False)
    assert verdicts["mm"].status is Status.NATIVE
    assert verdicts["embedding_dense_backward"].status is Status.UNKNOWN
    xpu = check(lm_meta, ["xpu"]).targets[0]
    assert xpu.count(Status.UNKNOWN) > 0 and xpu.count(Status.MISSING) == 0 and not xpu.failed
    assert any("partial list" in note for note in xpu.notes)


def test_sdpa_is_judged_as_a_composite_every_backend_can_run(lm_meta):
    verdicts = _verdicts(lm_meta, {"mm"})
    assert verdicts["scaled_dot_product_attention"].status is Status.COMPOSITE
    assert "_safe_softmax" not in verdicts  # how meta ran it is not judged
