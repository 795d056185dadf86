"""Report formats: JSON validates against the repo's schema, SARIF against SARIF 2.1.0, HTML escapes, CSV/Markdown are well formed."""

from __future__ import annotations

import csv
import io
import json
from html.parser import HTMLParser
from pathlib import Path

import jsonschema
import pytest

from accelport.findings import Finding, Report, finding_lines, report_schema
from accelport.inventory import scan
from accelport.inventory.render import (
    render_csv,
    render_html,
    render_markdown,
    render_sarif,
    render_table,
)

SARIF_SCHEMA = Path(__file__).resolve().parents[1] / "data" / "sarif-schema-2.1.0.json"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "legacy_cuda_app"

HOSTILE = '''import torch
x = torch.ones(1)
y = x.to("cuda"); s = "<script>alert('x')</script> | `tick` & more"
'''

@pytest.fixture(scope="module")
def example_report() -> Report:
    return scan([str(EXAMPLE)], jobs=1)

@pytest.fixture
def hostile_report(tmp_path) -> Report:
    path = tmp_path / "hostile.py"
    path.write_text(HOSTILE)
    return scan([str(path)], jobs=1)

def test_json_validates_against_schema(example_report):
    data = json.loads(example_report.to_json())
    jsonschema.Draft202012Validator(report_schema()).validate(data)
    assert data["summary"]["findings"] == len(data["findings"]) > 0

def test_json_round_trips(example_report):
    again = Report.from_dict(json.loads(example_report.to_json()))
    assert again.to_dict() == example_report.to_dict()

def test_finding_lines_encode_exactly_what_to_dict_holds(example_report, tmp_path):
    # The JSON writer encodes shared parts once; every variant must still come out as
    # the plain encoding of Finding.to_dict: a notebook cell, an acknowledged finding,
    # a non-ASCII snippet, statuses shared between findings and statuses not shared.
    notebook = tmp_path / "nb.ipynb"
    notebook.write_text(json.dumps({"cells": [{"cell_type": "code", "source": ["import torch\n", "x = torch.ones(1).cuda()  # é\n"]}]}))
    marked = tmp_path / "marked.py"
    marked.write_text("import torch\ntorch.cuda.synchronize()  # accelport: AP1103: ü\ntorch.cuda.synchronize()\n")
    findings = [*example_report.findings, *scan([str(notebook), str(marked)], jobs=1).findings]
    findings += [Finding.from_dict(f.to_dict()) for f in findings[:5]]  # statuses no longer shared
    assert any(f.location.cell for f in findings) and any(f.acknowledged for f in findings)
    encode = json.JSONEncoder(ensure_ascii=False, separators=(", ", ": ")).encode
    assert finding_lines(findings) == [encode(f.to_dict()) for f in findings]


def test_schema_rejects_a_broken_report(example_report):
    data = json.loads(example_report.to_json())
    data["findings"][0]["rule_id"] = "XX1"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(report_schema()).validate(data)

def test_sarif_validates_against_sarif_2_1_0(example_report, hostile_report):
    schema = json.loads(SARIF_SCHEMA.read_text())
    for report in (example_report, hostile_report):
        log = json.loads(render_sarif(report))
        jsonschema.Draft4Validator(schema).validate(log)
        results = log["runs"][0]["results"]
        assert len(results) == len(report.findings)
        rules = log["runs"][0]["tool"]["driver"]["rules"]
        for result in results:
            assert rules[result["ruleIndex"]]["id"] == result["ruleId"]

def test_sarif_reports_skipped_files_as_unsuccessful(tmp_path):
    (tmp_path / "bad.py").write_bytes(b"import torch\nx = '\xff'.cuda()\n")
    log = json.loads(render_sarif(scan([str(tmp_path)], jobs=1)))
    invocation = log["runs"][0]["invocations"][0]
    assert invocation["executionSuccessful"] is False
    assert "not UTF-8" in invocation["toolExecutionNotifications"][0]["message"]["text"]

class _TextCollector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.scripts = 0
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "script":
            self.scripts += 1

    def handle_data(self, data):
        self.text.append(data)

def test_html_is_self_contained_and_escapes_snippets(hostile_report):
    page = render_html(hostile_report)
    parser = _TextCollector()
    parser.feed(page)
    assert parser.scripts == 0  # the snippet's <script> stayed text
    assert "<script>alert" not in page
    assert any("<script>alert('x')</script>" in chunk for chunk in parser.text)
    assert "http://" not in page and "https://" not in page.replace("https://accelport.dev", "")

def test_csv_has_one_row_per_finding(example_report):
    rows = list(csv.DictReader(io.StringIO(render_csv(example_report))))
    assert len(rows) == len(example_report.findings)
    first = example_report.findings[0]
    assert rows[0]["rule_id"] == first.rule_id and int(rows[0]["line"]) == first.location.line

def test_markdown_table_survives_pipes_and_backticks(hostile_report):
    text = render_markdown(hostile_report)
    table_rows = [line for line in text.splitlines() if line.startswith("| hostile") or "hostile.py:" in line]
    assert table_rows
    header_cells = text.split("## Findings")[1].splitlines()[2].count(" | ")
    for row in table_rows:
        # escaped pipes do not split cells
        assert row.replace("\\|", "").count(" | ") == header_cells

def test_table_groups_by_file_and_summarises(example_report):
    text = render_table(example_report)
    assert "route B: operator rewrite" in text  # the CUDA extension in csrc/
    assert "examples/legacy_cuda_app/train.py" in text or str(EXAMPLE / "train.py") in text
    assert "framework API" in text


# --------------------------------------------------------------------------- SARIF locations


def _sarif_tree(tmp_path):
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / ".tools").mkdir()
    (repo / "src").mkdir()
    (tmp_path / "outside").mkdir()
    line = "torch.cuda.synchronize()\n"
    files = {
        "dot": repo / ".tools" / "t.py",
        "src": repo / "src" / "a b#1.py",  # a space and a # must be percent-encoded
        "outside": tmp_path / "outside" / "train.py",
    }
    for path in files.values():
        path.write_text("import torch\n" + line)
    return repo, files


def _resolved(log, artifact):
    from urllib.parse import urljoin

    base = log["runs"][0]["originalUriBaseIds"][artifact["uriBaseId"]]["uri"] if "uriBaseId" in artifact else ""
    return urljoin(base, artifact["uri"])


def test_sarif_uris_are_relative_to_the_repository_or_absolute(tmp_path, monkeypatch):
    repo, files = _sarif_tree(tmp_path)
    monkeypatch.chdir(repo / "src")
    # Inputs as a user types them: a dot-folder through `..`, a plain relative file, a file
    # outside the repository through `../..`, and an absolute path inside it.
    report = scan(["../.tools/t.py", "a b#1.py", "../../outside/train.py", str(files["dot"])], jobs=1)
    log = json.loads(render_sarif(report))
    jsonschema.Draft4Validator(json.loads(SARIF_SCHEMA.read_text())).validate(log)
    run = log["runs"][0]
    assert run["originalUriBaseIds"] == {"SRCROOT": {"uri": repo.as_uri() + "/"}}
    artifacts = [r["locations"][0]["physicalLocation"]["artifactLocation"] for r in run["results"]]
    assert {a["uri"] for a in artifacts} == {".tools/t.py", "src/a%20b%231.py", files["outside"].as_uri()}
    assert not any("uriBaseId" in a for a in artifacts if a["uri"].startswith("file:"))
    # Every location resolves to the very file that was scanned.
    assert {_resolved(log, a) for a in artifacts} == {p.as_uri() for p in files.values()}


def test_sarif_root_is_the_working_folder_outside_a_repository(tmp_path, monkeypatch):
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "x.py").write_text("import torch\ntorch.cuda.synchronize()\n")
    monkeypatch.chdir(tmp_path / "w")
    (tmp_path / "bad.py").write_bytes(b"import torch\nx = '\xff'.cuda()\n")  # skipped: a notification outside the root
    log = json.loads(render_sarif(scan(["x.py", str(tmp_path / "bad.py")], jobs=1)))
    run = log["runs"][0]
    assert run["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"] == {"uri": "x.py", "uriBaseId": "SRCROOT"}
    assert run["originalUriBaseIds"]["SRCROOT"]["uri"] == (tmp_path / "w").as_uri() + "/"
    notification = run["invocations"][0]["toolExecutionNotifications"][0]
    assert notification["locations"][0]["physicalLocation"]["artifactLocation"] == {"uri": (tmp_path / "bad.py").as_uri()}


def test_sarif_fingerprints_follow_rule_path_and_line_text_not_line_numbers(tmp_path):
    (tmp_path / ".git").mkdir()
    code = tmp_path / "m.py"
    code.write_text("import torch\ntorch.cuda.synchronize()\nx = torch.cuda.current_device()\ntorch.cuda.synchronize()\n")

    def fingerprints():
        log = json.loads(render_sarif(scan([str(code)], jobs=1), root=tmp_path))
        return [(r["ruleId"], r["locations"][0]["physicalLocation"]["region"]["startLine"], r["partialFingerprints"]["accelportFinding/v1"])
                for r in log["runs"][0]["results"]]

    before = fingerprints()
    assert len({fp for _, _, fp in before}) == len(before)  # the same line twice: told apart
    code.write_text("import torch\n\n\n# moved down\ntorch.cuda.synchronize()\nx  =  torch.cuda.current_device()\ntorch.cuda.synchronize()\n")
    after = fingerprints()
    assert [line for _, line, _ in after] != [line for _, line, _ in before]
    assert [(rule, fp) for rule, _, fp in after] == [(rule, fp) for rule, _, fp in before]  # moved, respaced: same
    code.write_text("import torch\ntorch.cuda.synchronize()\nx = torch.cuda.current_device(0)\ntorch.cuda.synchronize()\n")
    changed = fingerprints()
    assert changed[1][2] != before[1][2] and changed[0][2] == before[0][2]
