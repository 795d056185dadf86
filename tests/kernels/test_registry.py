"""Dispatch by device type, ACCELPORT_KERNEL_IMPL, and clear errors instead of silent fallbacks."""

from __future__ import annotations

import dataclasses
import logging

import pytest
import torch

from accelport.errors import UserError
from accelport.kernels import ENV_VAR, OPERATOR_NAMES, KernelError, get, registry, tl_compat


def test_registry_has_the_fifteen_operators():
    assert OPERATOR_NAMES == (
        "softmax", "log_softmax", "rms_norm", "layer_norm", "add_rms_norm", "rope", "swiglu", "geglu", "cross_entropy",
        "gemm", "bmm", "linear", "fused_linear_cross_entropy", "flash_attention", "block_sparse_attention",
    )  # fmt: skip
    for name in OPERATOR_NAMES:
        op = get(name)
        assert op.name == name and op.cases and op.device_cases and op.bench_cases
        assert op.implementations[:2] == ("reference", "triton")
    with pytest.raises(UserError, match="unknown operator 'conv'"):
        get("conv")


def test_device_type_picks_the_implementation(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    softmax, layer_norm = get("softmax"), get("layer_norm")
    assert softmax.select("cpu") == ("reference", False)
    assert softmax.select("mps") == ("reference", False)
    assert softmax.select("cuda") == ("triton", False)
    assert softmax.select("xpu") == ("triton", False)
    assert softmax.select("npu") == ("triton-npu", False)  # the vendor override, where one exists
    assert layer_norm.select("npu") == ("triton", False)
    monkeypatch.setattr(torch.version, "hip", "6.2", raising=False)
    assert registry.vendor_key("cuda") == "rocm"


def test_cpu_tensors_run_the_reference_by_default(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    op = get("rms_norm")
    called = []
    probe = dataclasses.replace(op, reference=lambda *a, **k: called.append("reference") or op.reference(*a, **k))
    x, w = torch.randn(3, 8), torch.ones(8)
    probe(x, w)
    assert called == ["reference"]


def test_env_var_forces_an_implementation(monkeypatch):
    op = get("swiglu")
    gate, up = torch.randn(4, 64), torch.randn(4, 64)
    ran = []
    probe = dataclasses.replace(op, triton=lambda *a: ran.append("triton") or op.triton(*a))
    monkeypatch.setenv(ENV_VAR, "swiglu=triton,gemm=reference")
    torch.testing.assert_close(probe(gate, up), op.reference(gate, up), atol=1e-5, rtol=1e-5)
    assert ran == ["triton"]  # the Triton kernel, under the interpreter, on CPU tensors
    assert get("gemm").select("cuda") == ("reference", True)
    monkeypatch.setenv(ENV_VAR, "triton")
    assert get("layer_norm").select("cpu") == ("triton", True)


@pytest.mark.parametrize(
    ("value", "message"),
    [("swiglu=cuda", "no implementation 'cuda'"), ("conv=triton", "unknown operator 'conv'"), ("swiglu=", "names no implementation")],
)
def test_bad_env_values_are_clear_errors(monkeypatch, value, message):
    monkeypatch.setenv(ENV_VAR, value)
    with pytest.raises(KernelError, match=message):
        get("swiglu")(torch.randn(2, 4), torch.randn(2, 4))


def test_requested_implementation_that_cannot_load_is_an_error_not_a_fallback(monkeypatch):
    broken = dataclasses.replace(get("softmax"), overrides={"npu": "accelport.kernels.no_such_module:softmax"})
    monkeypatch.setenv(ENV_VAR, "softmax=triton-npu")
    with pytest.raises(KernelError, match=r"'triton-npu' cannot load .*no_such_module"):
        broken(torch.randn(2, 8))
    monkeypatch.setenv(ENV_VAR, "softmax=triton")
    monkeypatch.setattr(tl_compat, "HAVE_TRITON", False)
    with pytest.raises(KernelError, match=r"needs triton, which is not installed.*unset ACCELPORT_KERNEL_IMPL"):
        get("softmax")(torch.randn(2, 8))


def test_automatic_choice_that_cannot_load_falls_back_loudly(monkeypatch, caplog):
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setattr(tl_compat, "HAVE_TRITON", False)
    monkeypatch.setattr(registry, "_device_type", lambda args: "cuda")
    x = torch.randn(2, 8)
    with caplog.at_level(logging.WARNING, logger="accelport.kernels.registry"):
        torch.testing.assert_close(get("softmax")(x), torch.softmax(x, -1))
    assert "running the PyTorch reference" in caplog.text


def test_triton_on_the_wrong_kind_of_tensor_is_an_error():
    with pytest.raises(KernelError, match="interpreter mode"):
        registry.check_runnable("gemm", "triton", "cuda")
    from accelport.kernels.block_sparse_attention import BlockLayout

    with pytest.raises(KernelError, match="forward-only"):
        q = torch.randn(1, 1, 16, 16, requires_grad=True)
        get("block_sparse_attention").triton(q, q, q, BlockLayout.from_block_mask(torch.ones(1, 1, dtype=torch.bool), 16))
