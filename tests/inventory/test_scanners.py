"""The scanner registry declares which files each scanner claims without importing it."""

from __future__ import annotations

import importlib
import subprocess
import sys

from accelport.inventory import scanners


def test_each_declared_line_matches_its_class():
    for declared in scanners.all_scanners():
        cls = getattr(importlib.import_module(declared.module), declared.cls)
        assert declared.suffixes == cls.suffixes, declared
        assert declared.filenames == cls.filenames, declared
        assert declared.filename_patterns == cls.filename_patterns, declared
        assert isinstance(declared.load(), cls)


def test_claims_follow_the_declared_patterns():
    assert scanners.scanner_for("setup.py").cls == "SetupScriptScanner"
    assert scanners.scanner_for("train.py").cls == "PythonScanner"
    assert scanners.scanner_for("Dockerfile.cuda").cls == "BuildFileScanner"
    assert scanners.scanner_for("requirements-gpu.txt").cls == "ManifestScanner"
    assert scanners.scanner_for("libfoo.so.12.1").cls == "BinaryScanner"
    assert scanners.scanner_for("KERNEL.CU").cls == "CxxScanner"
    assert scanners.scanner_for("notes.txt") is None


def test_python_only_tree_loads_no_other_scanner(tmp_path):
    (tmp_path / "train.py").write_text("import torch\nx = torch.zeros(2).cuda()\n")
    code = (
        "import sys\n"
        "from accelport.inventory import engine\n"
        f"report = engine.scan([{str(tmp_path)!r}], jobs=1)\n"
        "assert report.findings, 'the .cuda() call was not found'\n"
        "loaded = sorted(m for m in ('accelport.inventory.cxx', 'accelport.inventory.buildfiles',"
        " 'accelport.inventory.manifests', 'accelport.inventory.binary', 'accelport.inventory.cuda_api', 'pathspec')"
        " if m in sys.modules)\n"
        "print(loaded)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_cxx_file_loads_its_scanner_and_links_launches(tmp_path):
    (tmp_path / "k.cu").write_text("__global__ void k(float* x) { x[0] = 1; }\nvoid go(float* x) { k<<<1, 1>>>(x); }\n")
    from accelport.inventory import engine

    report = engine.scan([str(tmp_path)], jobs=1)
    assert any(f.location.path.endswith("k.cu") for f in report.findings)
