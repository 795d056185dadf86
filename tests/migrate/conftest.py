"""Fixtures for migrate: golden cases, a migrated copy of the example app, inventory on text."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from accelport.findings import Finding
from accelport.inventory.base import SourceFile
from accelport.inventory.python import PythonScanner

GOLDEN = Path(__file__).parent / "data" / "golden"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "legacy_cuda_app"


def _findings_in(text: str, path: str = "case.py") -> list[Finding]:
    return PythonScanner().scan(SourceFile(path, text.encode("utf-8")))


@pytest.fixture
def findings_in():
    """What `accelport inventory` reports for a piece of Python text."""
    return _findings_in


@pytest.fixture(scope="session")
def migrated_app(tmp_path_factory) -> Path:
    """A copy of examples/legacy_cuda_app after `accelport migrate --write --force`."""
    from accelport.migrate import migrate
    from accelport.migrate.writing import write_files

    target = tmp_path_factory.mktemp("migrated") / "legacy_cuda_app"
    shutil.copytree(EXAMPLE, target, ignore=shutil.ignore_patterns("__pycache__"))
    result = migrate([str(target)], jobs=1)
    assert not result.failed_files and not result.skipped
    write_files(result.files)
    return target


@pytest.fixture
def app_copy(tmp_path) -> Path:
    """A fresh, unmigrated copy of the example app."""
    target = tmp_path / "legacy_cuda_app"
    shutil.copytree(EXAMPLE, target, ignore=shutil.ignore_patterns("__pycache__"))
    return target
