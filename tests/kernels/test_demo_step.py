"""Demo step 50: a kernel finding mapped to its operator and validated; or, without one, no pretended mapping."""

from __future__ import annotations

import importlib

from accelport.cli._output import Style
from accelport.cli.demo import DemoContext
from accelport.findings import (
    Category,
    Effort,
    EffortEstimate,
    Finding,
    Location,
    Report,
    Route,
    RouteDecision,
)

step = importlib.import_module("accelport.cli.demo_steps.step50_kernels")


def _report(findings):
    return Report("test", ["app"], findings, 1, 10, [], RouteDecision(Route.B, ()), EffortEstimate({}, 0, 0), [])


def _finding(category, replacement):
    return Finding(
        rule_id="AP5001", category=category, family="kernel", symbol="rms_norm_kernel", message="kernel definition",
        effort=Effort.HIGH, route=Route.B, location=Location("csrc/rms_norm.cu", 12, 1, 30, 1), replacement=replacement,
    )  # fmt: skip


def _ctx(tmp_path, report):
    ctx = DemoContext(examples=tmp_path, workdir=tmp_path, style=Style(False))
    if report is not None:
        ctx.results["inventory"] = report
    return ctx


def test_kernel_finding_is_mapped_to_its_operator_and_validated(tmp_path, capsys):
    ctx = _ctx(tmp_path, _report([_finding(Category.KERNEL, "accelport.kernels rms_norm")]))
    assert step.run(ctx) is True
    out = capsys.readouterr().out
    assert "csrc/rms_norm.cu:12:1  rms_norm_kernel" in out and "->  rms_norm" in out
    assert "rms_norm [triton] vs PyTorch reference, Triton interpreter on CPU: 48/48 checks pass" in out
    assert ctx.results["kernels"] == {"operators": ["rms_norm"], "mapped": True, "passed": True}


def test_without_a_kernel_finding_it_says_so_and_maps_nothing(tmp_path, capsys):
    ctx = _ctx(tmp_path, _report([_finding(Category.FRAMEWORK_API, "accelport.kernels softmax")]))
    assert step.run(ctx) is True
    out = capsys.readouterr().out
    assert "no kernel finding was available" in out and "No mapping was made" in out
    assert "->" not in out and "softmax" not in out
    assert ctx.results["kernels"]["mapped"] is False and ctx.results["kernels"]["operators"] == ["rms_norm"]


def test_operator_names_are_read_from_replacements():
    assert step.operator_named("accelport.kernels rms_norm") == "rms_norm"
    assert step.operator_named("use accelport.kernels flash_attention (causal)") == "flash_attention"
    assert step.operator_named("torch.nn.functional.rms_norm") == "rms_norm"
    assert step.operator_named("hipBLAS") is None
