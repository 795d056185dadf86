"""Golden tests, one per API family: a CUDA-era input and its hand-written migrated form.

The expected files are written by hand from the rules' documented rewrites; they are
never produced by the code under test.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from accelport.migrate import migrate_source
from accelport.source.markers import marked_rules

GOLDEN = Path(__file__).parent / "data" / "golden"
GOLDEN_CASES = sorted(p.name.removesuffix(".input.py") for p in GOLDEN.glob("*.input.py"))


def load(case: str) -> tuple[str, str]:
    return (GOLDEN / f"{case}.input.py").read_text(), (GOLDEN / f"{case}.expected.py").read_text()


def test_every_family_has_a_golden_case():
    families = {"device", "torch_cuda", "amp", "distributed", "backends", "profiling", "environment", "imports"}
    assert families <= set(GOLDEN_CASES)


@pytest.mark.parametrize("case", GOLDEN_CASES)
def test_migrates_to_the_hand_written_result(case):
    source, expected = load(case)
    result = migrate_source(source, f"{case}.py")
    assert result.error is None
    assert result.migrated == expected


@pytest.mark.parametrize("case", GOLDEN_CASES)
def test_expected_result_is_a_fixed_point(case):
    """Idempotence: migrating the migrated code changes nothing."""
    _source, expected = load(case)
    again = migrate_source(expected, f"{case}.py")
    assert again.migrated == expected
    assert again.changes == []


@pytest.mark.parametrize("case", GOLDEN_CASES)
def test_what_remains_is_exactly_the_markers(case, findings_in):
    _source, expected = load(case)
    ast.parse(expected)
    remaining = findings_in(expected)
    assert [f for f in remaining if f.autofix] == []
    assert all(f.acknowledged for f in remaining)
    found = {(f.location.line, f.rule_id) for f in remaining}
    markers = {(n, rule) for n, line in enumerate(expected.splitlines(), 1) for rule in marked_rules(line)}
    assert found == markers
