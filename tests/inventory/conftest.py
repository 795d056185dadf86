"""Helpers for inventory tests: scan a snippet or a small tree and look at what was found."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from accelport.inventory import scan


def scan_source(tmp_path: Path, code: str, name: str = "snippet.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(code))
    return scan([str(path)], jobs=1)


@pytest.fixture
def scan_code(tmp_path):
    """scan_code(code) -> list of (rule_id, line, symbol) for one Python file."""

    def run(code: str, name: str = "snippet.py"):
        report = scan_source(tmp_path, code, name)
        assert not report.skipped, report.skipped
        return [(f.rule_id, f.location.line, f.symbol) for f in report.findings]

    return run
