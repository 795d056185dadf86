"""Golden files per vendor x engine, written by hand from the vendor facts (not from the renderer).

`@GRES_INDICES_SH@` in a golden script stands for the shell parser of `scontrol show job -d`,
whose behaviour tests/pools/test_gres_indices.py checks on its own.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from accelport.pools.render import render_for_pool
from accelport.pools.slurm import GRES_INDICES_SH
from accelport.pools.validate import sbatch_problems, validate_object

GOLDEN = Path(__file__).resolve().parent / "golden"
VENDOR_POOLS = ["nvidia", "ascend", "amd", "mthreads", "cambricon"]


@pytest.mark.parametrize("pool_name", VENDOR_POOLS)
def test_slurm_script_matches_golden(pool_name, golden_job, golden_pools):
    rendered = render_for_pool(golden_job, golden_pools[pool_name].on("slurm"))
    assert rendered.filename == f"ft-{pool_name}.sbatch"
    assert rendered.text == (GOLDEN / f"{pool_name}.sbatch").read_text().replace("@GRES_INDICES_SH@", GRES_INDICES_SH)
    assert sbatch_problems(rendered.text, rendered.filename) == []


@pytest.mark.parametrize("pool_name", VENDOR_POOLS)
def test_kubernetes_manifest_matches_golden(pool_name, golden_job, golden_pools):
    rendered = render_for_pool(golden_job, golden_pools[pool_name].on("kubernetes"))
    expected = [doc for doc in yaml.safe_load_all((GOLDEN / f"{pool_name}.yaml").read_text()) if doc]
    assert [doc for doc in yaml.safe_load_all(rendered.text) if doc] == expected
    assert list(rendered.objects) == expected
    for obj in rendered.objects:
        assert validate_object(obj) == [], obj["kind"]
