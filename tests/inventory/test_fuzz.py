"""Random bytes and random Python never crash the scanner; every file ends up scanned or reported skipped."""

from __future__ import annotations

import contextlib

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accelport.inventory import scan
from accelport.inventory.base import SourceFile
from accelport.inventory.python import NotebookScanner, PythonScanner

TOKENS = [
    "import torch",
    "from torch.cuda.amp import autocast as ac",
    "torch.cuda.synchronize()",
    'x.to("cuda")',
    "x.cuda()",
    'f"cuda:{r}"',
    '"nccl"',
    "os.environ['CUDA_VISIBLE_DEVICES']",
    "# torch.cuda",
    '"""docstring torch.cuda"""',
    "'''",
    "def f(device='cuda'):",
    "class C:",
    "    device: str = 'cuda'",
    "if torch.cuda.is_available():",
    "else:",
    "    pass",
    "(",
    ")",
    "[",
    "\\",
    "é",
    "\t",
    "@torch.cuda.amp.custom_fwd",
    "lambda device='cuda:0': device",
    "{'device': 'cuda'}",
    "ac()",
]

python_soup = st.lists(st.sampled_from(TOKENS), max_size=40).map(lambda parts: "\n".join(parts))
token_soup = st.lists(st.sampled_from(TOKENS), max_size=40).map(lambda parts: " ".join(parts))


def _check_file_accounted(tmp_path, data: bytes, name: str) -> None:
    path = tmp_path / name
    path.write_bytes(data)
    report = scan([str(path)], jobs=1)
    assert report.files_scanned + len(report.skipped) == 1
    for finding in report.findings:
        assert finding.location.line >= 1 and finding.location.column >= 1


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=2000))
def test_random_bytes(tmp_path, data):
    _check_file_accounted(tmp_path, data, "random.py")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.one_of(python_soup, token_soup, st.text(max_size=500)))
def test_random_python(tmp_path, text):
    _check_file_accounted(tmp_path, text.encode("utf-8", "surrogatepass"), "soup.py")


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=1000))
def test_random_notebook_bytes(tmp_path, data):
    _check_file_accounted(tmp_path, b'{"cells": [' + data, "nb.ipynb")


@settings(max_examples=200, deadline=None)
@given(text=python_soup)
def test_scanner_either_finds_or_skips(text):
    # Straight at the scanner: a ScanSkipped is the only allowed failure.
    from accelport.inventory.base import ScanSkipped

    source = SourceFile("soup.py", text.encode("utf-8"))
    for scanner in (PythonScanner(), NotebookScanner()):
        with contextlib.suppress(ScanSkipped):
            scanner.scan(source)
