"""The planning sweep: every operator gets a config on every hardware profile at Llama-class sizes."""

from __future__ import annotations

import dataclasses

from accelport.kernels import OPERATOR_NAMES, configs, hardware, planning


def test_every_operator_space_is_planned_on_every_profile_at_llama_sizes():
    rows = list(planning.sweep())
    missing = planning.unplanned(rows)
    assert not missing, [(r.space, r.profile, r.label, dict(r.rejected)) for r in missing[:10]]
    # The sweep covered what it claims: every operator and override, every profile (MTT and MLU included), 3 dtypes.
    assert {r.space for r in rows} >= set(OPERATOR_NAMES) | {"softmax_npu", "rms_norm_npu"}
    profiles = {r.profile for r in rows}
    assert profiles == set(planning.sweep_profiles())
    assert {"ascend-910b2", "mi300x", "max-1550", "a100-sxm4-80gb", "h100-sxm", "h200-sxm"} <= profiles
    assert {hardware.generic(v, n).key for v, n in planning.GENERIC_DEVICES.items()} <= profiles
    assert {r.problem["dtype"] for r in rows} == set(planning.DTYPES)
    for refusal in (r.refusal for r in rows if r.refusal):
        assert "bytes" in refusal or "limit" in refusal  # a documented refusal names the limit


def test_every_operator_has_llama_shapes_in_the_sweep():
    problems = planning.llama_problems()
    assert set(OPERATOR_NAMES) <= set(problems)


def test_the_issue_cases_are_planned_ascend_gemm_attention_and_wide_norms_and_narrow_norms_everywhere():
    ascend = {r.space: r for r in planning.sweep({"ascend-910b2": hardware.profile("ascend-910b2")}) if r.problem["dtype"] == "bfloat16"}
    assert ascend["gemm"].planned and "w1 s1" in ascend["gemm"].config  # no warps or stages where the grid binds to cores
    rows = list(planning.sweep(dtypes=("bfloat16",)))
    wide = [r for r in rows if r.profile == "ascend-910b2" and r.space in ("layer_norm", "rms_norm") and r.problem["cols"] == 8192]
    assert wide and all(r.planned and "BLOCK=4096" in r.config for r in wide)  # two tiles of a row in the unified buffer
    narrow = [r for r in rows if r.space in ("layer_norm", "rms_norm") and r.problem["cols"] <= 32]
    assert {r.profile for r in narrow} == set(planning.sweep_profiles()) and all(r.planned for r in narrow)


def test_the_sweep_reports_a_profile_that_cannot_hold_a_plan():
    """A planted limit (a device with 1 KiB of shared memory) makes triples unplanned: the sweep can fail."""
    tiny = dataclasses.replace(hardware.profile("h100-sxm"), key="tiny", onchip_bytes_per_block=1024, onchip_bytes_per_core=1024)
    missing = planning.unplanned(list(planning.sweep({"tiny": tiny}, dtypes=("bfloat16",))))
    assert {r.space for r in missing} >= {"gemm", "flash_attention"}
    assert all("1024 bytes per block" in " ".join(r.rejected) for r in missing if r.space == "gemm")


def test_a_wide_norm_on_ascend_chooses_the_looped_kernel(monkeypatch):
    import torch

    from accelport.kernels import layer_norm, tl_compat

    with configs.targeting(hardware.profile("ascend-910b2")), tl_compat.recording() as launches:
        layer_norm.forward(torch.empty(2, 8192, device="meta"), torch.empty(8192, device="meta"), None, 1e-5)
    assert [launch.name for launch in launches] == ["_layer_norm_fwd_looped"] and launches[0].kwargs["BLOCK"] == 4096
