"""The demo's kernel step without triton (a wheel installed without [kernels]): one line naming the extra."""

import importlib.util

import pytest

from accelport.cli.demo_steps import step50_kernels
from accelport.errors import MissingDependency


def test_kernel_step_without_triton_names_the_extra(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "triton" else real(name, *a))
    with pytest.raises(MissingDependency, match=r"accelport\[kernels\]"):
        step50_kernels._validate("rms_norm")
