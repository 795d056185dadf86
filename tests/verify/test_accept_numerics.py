"""accept's correctness and precision sections run the real numerics library on real dumps and curves."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import torch

from accelport.verify import accept

_spec = importlib.util.spec_from_file_location("numerics_helpers", Path(__file__).with_name("numerics_helpers.py"))
helpers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(helpers)


def _spec_file(folder: Path, test_dump: str, test_curve: str) -> Path:
    spec = folder / "spec.toml"
    spec.write_text(
        'title = "numerics"\n\n'
        f'[correctness]\nreference = "ref"\ntest = "{test_dump}"\n'
        'options = { tolerances = { float32 = [1e-3, 1e-3] }, criterion = "norm", top = 10 }\n\n'
        f'[precision]\nreference = "ref.csv"\ntests = ["{test_curve}"]\n'
        'options = { metrics = ["loss"], tolerance = 0.01 }\n'
    )
    return spec


def _curve(path: Path, scale: float) -> None:
    rows = [f"{step},{scale * 4.0 / (step + 1):.6f}" for step in range(20)]
    path.write_text("step,loss\n" + "\n".join(rows) + "\n")


def test_same_runs_pass_and_a_changed_weight_and_a_drifting_curve_fail(tmp_path, cli):
    helpers.dump(tmp_path / "ref", helpers.tinylm())
    helpers.dump(tmp_path / "same", helpers.tinylm())
    faulty = helpers.tinylm()
    with torch.no_grad():
        next(faulty.parameters()).view(-1)[0] += 0.05
    helpers.dump(tmp_path / "fault", faulty)
    _curve(tmp_path / "ref.csv", 1.0)
    _curve(tmp_path / "same.csv", 1.002)  # within the 1% gap
    _curve(tmp_path / "drift.csv", 1.05)  # 5% off

    good = accept.evaluate(accept.load_spec(_spec_file(tmp_path, "same", "same.csv")))
    statuses = {check.section: check.status for check in good.checks}
    assert statuses == {"correctness": "pass", "precision": "pass"}, [c.summary for c in good.checks]
    assert good.passed

    result = cli("accept", _spec_file(tmp_path, "fault", "drift.csv"), "--output-dir", tmp_path / "out")
    assert result.code == 1
    data = json.loads((tmp_path / "out" / "report.json").read_text())
    failed = {check["section"]: check for check in data["checks"] if check["status"] == "fail"}
    assert set(failed) == {"correctness", "precision"}
    # The changed weight is the model's first parameter (TinyLM.pos): found at its source, by name.
    divergence = failed["correctness"]["figures"]["first_divergence"]
    assert (divergence["op"], divergence["module"]) == ("param:pos", "TinyLM")
    assert "param:pos in TinyLM" in failed["correctness"]["summary"]
    assert failed["precision"]["figures"]["final_gap"] > 0.01
