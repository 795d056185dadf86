"""compare pins the first divergence at the first failing record even when its inputs already differ.

A record whose inputs already differ is where the difference first shows; a later record whose
inputs agree and output differs is a second, separate fault, and must not take its place.
"""

from __future__ import annotations

from pathlib import Path

import torch

from accelport.verify import capture
from accelport.verify.numerics.compare import compare_dumps


def _run(folder: Path, shift: float, scale: float, extra: bool = False) -> Path:
    """relu, (+ shift: not recorded), (a recorded sigmoid when `extra`), mul by 2 then 4, and an independent mul by `scale`."""
    x = torch.linspace(-2, 2, 512)
    w = torch.linspace(0.5, 1.5, 512)
    with capture(folder, step_on="manual", ops=("aten.relu*", "aten.mul*", "aten.sigmoid*")):
        y = torch.relu(x)
        y = y + shift  # aten.add: outside the filter, so no record explains the change
        if extra:
            y = torch.sigmoid(y)  # recorded on one side only: the cause compare must name
        (y * 2.0) * 4.0  # the second mul inherits the difference: its inputs differ too
        w * scale  # inputs agree on both sides; output differs when `scale` does
    return folder


def test_inputs_differing_without_a_recorded_cause_pins_the_first_failing_record(tmp_path):
    ref = _run(tmp_path / "ref", shift=0.0, scale=3.0)
    test = _run(tmp_path / "test", shift=0.5, scale=3.1)
    with compare_dumps(ref, test) as result:
        first = result.to_dict()["first_divergence"]
        failing = [row for row in result.rows() if row["status"] == "fail"]
    # Every mul fails: the first because its input was shifted, the next because it uses the
    # first's output, the last (inputs agreeing) by its own scale.
    assert [r["inputs_ok"] for r in failing] == [False, False, True]
    assert {r["op"] for r in failing} == {"aten.mul.Tensor"}
    assert first["row"] == failing[0]["row"]
    assert first["op"] == "aten.mul.Tensor" and first["inputs_ok"] is False
    assert first["cause"].startswith("inputs already differ and no recorded op explains it")
    assert first["replay"]["status"] == "not replayed"


def test_an_op_only_one_side_ran_is_named_as_the_cause(tmp_path):
    ref = _run(tmp_path / "ref", shift=0.0, scale=3.0)
    test = _run(tmp_path / "test", shift=0.0, scale=3.1, extra=True)
    with compare_dumps(ref, test) as result:
        first = result.to_dict()["first_divergence"]
        failing = [row for row in result.rows() if row["status"] == "fail"]
    assert first["op"] == "aten.sigmoid.default" and first["status"] == "only_test"
    assert first["cause"].startswith("op ran on TEST only and changed values")
    assert first["first_failing_record"]["row"] == failing[0]["row"]
    assert failing[0]["inputs_ok"] is False
