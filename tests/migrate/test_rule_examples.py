"""Every rule migrate fixes: its documented `before` example migrates to code without that finding."""

from __future__ import annotations

import ast

import pytest

from accelport import knowledge
from accelport.migrate import migrate_source

PRELUDE = (
    "import argparse\nimport os\n\nimport torch\nimport torch.distributed as dist\n"
    "from torch.nn.parallel import DistributedDataParallel as DDP\nfrom torch.profiler import ProfilerActivity, profile\n"
)
FIXED_RULES = sorted(r.id for r in knowledge.rules().values() if r.autofix)


def runnable(before: str) -> str:
    """The example as a module: a body for a trailing `if ...:`, a try for `except`, a def under a decorator."""
    text = before
    if text.lstrip().startswith("except"):
        text = "try:\n    pass\n" + text
    if text.rstrip().splitlines()[-1].strip().startswith("@"):
        text += "\ndef step():\n    pass"
    elif text.rstrip().endswith(":"):
        text += "\n    pass"
    return PRELUDE + text + "\n"


@pytest.mark.parametrize("rule_id", FIXED_RULES)
def test_before_example_is_fixed(rule_id, findings_in):
    source = runnable(knowledge.rules()[rule_id].before)
    assert [f for f in findings_in(source) if f.rule_id == rule_id], "the example must show the rule"
    migrated = migrate_source(source, "example.py").migrated
    ast.parse(migrated)
    assert [f.rule_id for f in findings_in(migrated) if f.autofix] == []
