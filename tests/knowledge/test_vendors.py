"""Vendor profiles: shipped data is complete, and a site file can add or override a vendor."""

from __future__ import annotations

import pytest

from accelport import knowledge
from accelport.errors import UserError


@pytest.fixture(autouse=True)
def _reset_user_files():
    yield
    knowledge.set_user_files([])


def test_every_vendor_names_its_sources():
    for profile in knowledge.vendors().values():
        assert profile.sources, profile.key


def test_site_file_overrides_and_adds(tmp_path):
    site = tmp_path / "site.toml"
    site.write_text(
        """
[vendor.npu]
k8s_resources = ["huawei.com/Ascend910B3"]

[vendor.newchip]
name = "New Chip"
torch_device = "newchip"
reuses_torch_cuda = false
adapter_package = "torch_newchip"
adapter_import = "torch_newchip"
distributed_backend = "nccl_new"
collective_library = "NCL"
visible_devices = ["NEWCHIP_VISIBLE_DEVICES"]
container_visible_devices = []
k8s_resources = ["newchip.com/gpu"]
k8s_node_labels = {}
slurm_gres = "gpu"
monitoring_cli = "nc-smi"
warp_size = 32
fp64 = "unknown"
profiler_activity = "PrivateUse1"
"""
    )
    knowledge.set_user_files([site])
    profiles = knowledge.vendors()
    assert profiles["npu"].k8s_resources == ("huawei.com/Ascend910B3",)
    assert profiles["npu"].distributed_backend == "hccl"  # untouched fields survive the merge
    assert profiles["newchip"].visible_devices_var == "NEWCHIP_VISIBLE_DEVICES"


def test_incomplete_site_vendor_is_a_clear_error(tmp_path):
    site = tmp_path / "site.toml"
    site.write_text('[vendor.half]\nname = "Half"\n')
    knowledge.set_user_files([site])
    with pytest.raises(UserError, match=r"site.toml: vendor.half lacks `torch_device`"):
        knowledge.vendors()


def test_missing_site_file_is_a_clear_error(tmp_path):
    knowledge.set_user_files([tmp_path / "nope.toml"])
    with pytest.raises(UserError, match="knowledge file not found"):
        knowledge.vendors()
