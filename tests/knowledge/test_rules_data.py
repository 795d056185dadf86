"""Rule data: well-formed IDs and sections, and a docs page generated from it that is up to date."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from accelport import knowledge
from accelport.findings import Category

REPO = Path(__file__).resolve().parents[2]


def test_rule_ids_match_their_category_and_have_every_section():
    for rule in knowledge.rules().values():
        assert Category.from_rule_id(rule.id) is rule.category
        for section in (rule.summary, rule.why, rule.before, rule.after, rule.fix):
            assert section.strip(), (rule.id, section)
        assert rule.sources, rule.id


def test_every_catalogue_entry_points_at_a_known_rule():
    rules = knowledge.rules()
    for symbol, entry in knowledge.torch_api().items():
        assert entry["rule"] in rules, symbol


def test_docs_page_is_generated_and_current():
    result = subprocess.run([sys.executable, "scripts/gen_rules_doc.py", "--check"], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
