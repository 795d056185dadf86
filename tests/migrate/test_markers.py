"""Inline markers: how inventory recognises them (the small change migrate needs in the Python scanner)."""

from __future__ import annotations

import pickle

from accelport.source.markers import comment_of, format_marker, marked_rules


def test_marker_format_and_recognition():
    marker = format_marker("AP1403", "CUDA-only autotuning")
    assert marker == "# accelport: AP1403: CUDA-only autotuning"
    line = f"torch.backends.cudnn.benchmark = True  # keep  {marker}  # accelport: AP1109: other"
    assert marked_rules(line) == {"AP1403", "AP1109"}


def test_a_marker_inside_a_string_is_not_a_marker():
    assert marked_rules('text = "# accelport: AP1403: not a comment"') == set()
    assert comment_of('text = "#"  # real') == "# real"
    assert marked_rules("x = (1,  # accelport: AP1007: in an open bracket") == {"AP1007"}


def test_marked_finding_is_acknowledged_and_survives_pickling(findings_in):
    source = "import torch\ntorch.backends.cudnn.benchmark = True  # accelport: AP1403: tune the target\ntorch.cuda.synchronize()  # accelport: AP1403: wrong rule\n"
    findings = {f.rule_id: f for f in findings_in(source)}
    assert findings["AP1403"].acknowledged
    assert not findings["AP1103"].acknowledged  # a marker for another rule acknowledges nothing
    assert pickle.loads(pickle.dumps(findings["AP1403"])).acknowledged  # parallel scans ship findings by pickle
    assert findings["AP1403"].to_dict()["acknowledged"] is True
    assert "acknowledged" not in findings["AP1103"].to_dict()


def test_report_of_a_migrated_tree_validates_against_the_schema(migrated_app):
    import jsonschema

    from accelport.findings import report_schema
    from accelport.inventory import scan

    report = scan([str(migrated_app)], jobs=1).to_dict()
    assert any(f.get("acknowledged") for f in report["findings"])
    jsonschema.validate(report, report_schema())
