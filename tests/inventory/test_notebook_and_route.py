"""Notebooks cell by cell; route and effort roll-up; site knowledge files extend what is found."""

from __future__ import annotations

import json

import pytest

from accelport import knowledge
from accelport.findings import Route
from accelport.inventory import scan


def _notebook(cells):
    return json.dumps(
        {
            "nbformat": 4,
            "nbformat_minor": 5,
            "metadata": {},
            "cells": [
                {"cell_type": kind, "metadata": {}, "source": source, **({"outputs": [], "execution_count": None} if kind == "code" else {})}
                for kind, source in cells
            ],
        }
    )


def test_notebook_cells_have_cell_relative_locations(tmp_path):
    path = tmp_path / "explore.ipynb"
    path.write_text(
        _notebook(
            [
                ("markdown", "We use torch.cuda here (markdown is not code)"),
                ("code", ["import torch\n", "%matplotlib inline\n", "x = torch.ones(2).cuda()\n"]),
                ("code", "!nvidia-smi\nprint(torch.cuda.device_count())"),
            ]
        )
    )
    report = scan([str(path)], jobs=1)
    found = [(f.rule_id, f.location.cell, f.location.line) for f in report.findings]
    assert found == [("AP1004", 2, 3), ("AP1101", 3, 2)]


def test_imports_carry_over_between_cells(tmp_path):
    path = tmp_path / "nb.ipynb"
    path.write_text(
        _notebook(
            [
                ("code", "import torch as th\nx = th.ones(2)\nx?"),
                ("code", "%%bash\necho torch.cuda\n"),
                ("code", "th.cuda.synchronize()"),
            ]
        )
    )
    report = scan([str(path)], jobs=1)
    assert not report.skipped
    assert [(f.rule_id, f.location.cell, f.location.line) for f in report.findings] == [("AP1103", 3, 1)]


def test_invalid_notebook_is_skipped_with_reason(tmp_path):
    (tmp_path / "broken.ipynb").write_text('{"cells": [ torch.cuda')
    report = scan([str(tmp_path)], jobs=1)
    assert "not a valid notebook" in report.skipped[0].reason


def test_route_a_for_framework_only(tmp_path):
    (tmp_path / "a.py").write_text("import torch\ntorch.cuda.synchronize()\n")
    report = scan([str(tmp_path)], jobs=1)
    assert report.route.route is Route.A


def test_route_b_when_a_cuda_only_package_or_extension_is_used(tmp_path):
    (tmp_path / "a.py").write_text("import torch\ntorch.cuda.synchronize()\n")
    (tmp_path / "b.py").write_text("from flash_attn import flash_attn_func\n")
    report = scan([str(tmp_path)], jobs=1)
    assert report.route.route is Route.B
    assert any("dependency" in reason for reason in report.route.reasons)
    per_file = {f.path.rsplit("/", 1)[-1]: f.route.route for f in report.files}
    assert per_file == {"a.py": Route.A, "b.py": Route.B}
    finding = next(f for f in report.findings if f.rule_id == "AP8001")
    assert finding.backends["npu"].value == "alternative"
    assert "npu_fusion_attention" in finding.replacement


def test_route_c_when_route_b_work_is_large(tmp_path):
    lines = ["from torch.utils.cpp_extension import load"]
    lines += [f"m{i} = load(name='k{i}', sources=['k{i}.cu'])" for i in range(25)]
    (tmp_path / "build.py").write_text("\n".join(lines) + "\n")
    report = scan([str(tmp_path)], jobs=1)
    assert report.route.route is Route.C
    assert any("high-effort" in reason for reason in report.route.reasons)
    assert report.effort.hours_low >= 25 * 4


def test_effort_hours_follow_the_levels(tmp_path):
    (tmp_path / "a.py").write_text("import torch\nprint(torch.cuda.get_device_capability())\n")  # medium, not auto
    report = scan([str(tmp_path)], jobs=1)
    assert report.effort.by_level["medium"] == 1
    assert (report.effort.hours_low, report.effort.hours_high) == (0.5, 2.0)


@pytest.fixture
def site_file(tmp_path):
    site = tmp_path / "site.toml"
    site.write_text(
        '[[package]]\nmodule = "acme_kernels"\nsummary = "ACME fused CUDA kernels"\neffort = "high"\n'
        'alternatives = { npu = "acme-npu" }\n\n[effort.hours]\nhigh = [10.0, 20.0]\n'
    )
    knowledge.set_user_files([site])
    yield site
    knowledge.set_user_files([])


def test_site_knowledge_adds_a_package_and_recalibrates_hours(tmp_path, site_file):
    code = tmp_path / "code"
    code.mkdir()
    (code / "m.py").write_text("import acme_kernels\n")
    report = scan([str(code)], jobs=1)
    (finding,) = report.findings
    assert finding.rule_id == "AP8001" and finding.symbol == "acme_kernels"
    assert finding.effort.value == "high" and finding.backends["npu"].value == "alternative"
    assert (report.effort.hours_low, report.effort.hours_high) == (10.0, 20.0)
