"""Ahead-of-time compile check, no GPU: every launch builds for sm_90 and gfx942 and fits their on-chip memory."""

from __future__ import annotations

import json

import pytest

from accelport.kernels import OPERATOR_NAMES, aot, configs, hardware
from accelport.kernels.configs import Config

from .conftest import AOT_TARGETS

pytestmark = pytest.mark.aot


def test_every_operator_builds_for_sm90_and_gfx942_within_shared_memory(aot_check):
    results = aot_check.results()
    failed = [f"{r.op}/{r.kernel}/{r.target}/{r.config}: {r.error or f'{r.shared_bytes} > {r.limit_bytes} bytes'}" for r in results if not r.passed]
    assert not failed, failed
    assert {(r.op, r.target) for r in results} == {(op, t) for op in OPERATOR_NAMES for t in AOT_TARGETS}
    for r in results:
        assert r.limit_bytes == hardware.for_target(r.target).onchip_bytes_per_block
    # The dots became tensor-core instructions: wgmma on sm_90, MFMA on gfx942.
    for op in ("gemm", "flash_attention", "block_sparse_attention"):
        assert {r.matrix_instructions for r in results if r.op == op and r.target == "sm_90"} == {"wgmma"}
        assert {r.matrix_instructions for r in results if r.op == op and r.target == "gfx942"} == {"mfma"}
    # Backward kernels are built too, not just the forward ones.
    assert {"_rms_norm_bwd", "_layer_norm_bwd", "_cross_entropy_bwd", "_softmax_bwd", "_glu_bwd"} <= {r.kernel for r in results}


def test_a_tuned_config_that_does_not_fit_fails_the_check(tmp_path):
    """A tuned table entry is part of the tuned set: one that overflows shared memory is caught."""
    # Six stages of 128x64 and 64x256 bf16 tiles: 288 KiB of shared memory, H100 has 227 KiB per block.
    oversized = Config.make({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8}, 8, 6)
    entry = configs.TunedEntry("h100-sxm", "gemm", "bfloat16", "M4096-N4096-K4096", oversized, 1.0, "planted")
    table = tmp_path / "tuned-h100.json"
    table.write_text(configs.table_json("h100-sxm", "NVIDIA H100 80GB HBM3", [entry], {"source": "planted by a test"}))
    jobs = aot.plan(["gemm"], ["sm_90"], ["bfloat16"], cases=["4096x4096x4096"])
    check = aot.Check(jobs, workers=1, env={configs.TUNED_ENV: str(table)})
    try:
        results = check.results()
    finally:
        check.close()
    planted = [r for r in results if r.config.endswith("w8 s6")]
    assert planted, [r.to_dict() for r in results]
    assert not any(r.passed for r in planted)
    assert all(r.shared_bytes is not None and r.shared_bytes > r.limit_bytes for r in planted), [r.to_dict() for r in planted]
    assert json.loads(table.read_text())["entries"][0]["config"]["num_stages"] == 6
