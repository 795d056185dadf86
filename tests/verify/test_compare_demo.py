"""`accelport demo` step 40: dumps the example twice, compares (pass), then finds the planted LayerNorm fault."""

from __future__ import annotations

import pytest


@pytest.mark.slow
def test_demo_numerics_step(cli, tmp_path):
    result = cli("demo", "--only", "numerics", "--output-dir", tmp_path / "demo")
    assert result.code == 0, result.out + result.err
    assert "compare original vs migrated: PASS" in result.out
    assert "compare original vs faulty:   FAIL" in result.out
    assert "first divergence: aten.native_layer_norm.default in TinyLM.blocks.1.ln2" in result.out
    assert (tmp_path / "demo" / "numerics" / "compare-fault.html").read_text().count("<svg") >= 1
