"""One sanitizer for the terminal, one for Markdown: hostile file names and source lines cannot drive either.

A file name or a source line holding ESC sequences (colour, OSC title, cursor moves), BEL
or HTML reaches every renderer; the terminal views show the control characters as visible
escapes (nothing lost), Markdown keeps HTML inert, and a diff stays appliable by git.
"""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from accelport.report import markdown
from accelport.textsafe import Styled, diff_path, one_line, terminal

ESC_NAME = "evil\x1b[31mred\x1b]0;pwned\x07<img src=x onerror=alert(1)>.py"
ESC_LINE = "x = torch.zeros(1).cuda()  # \x1b[2J\x1b]0;owned\x07 <script>alert(1)</script>\n"
RAW_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f]")


def _no_raw_controls(text: str) -> None:
    found = RAW_CONTROLS.findall(text.replace("\r\n", "\n"))
    assert not found, (found, text[:300])


def _outside_code_spans(cell: str) -> str:
    """A Markdown text with its code spans (a run of N backticks to the next run of exactly N) removed."""
    return re.sub(r"(?<!`)(`+)(?!`).*?(?<!`)\1(?!`)", "", cell)


def _no_live_html(text: str) -> None:
    for line in text.splitlines():
        assert "<" not in _outside_code_spans(line.replace("\\`", "")), line


@pytest.fixture
def tree(tmp_path) -> Path:
    root = tmp_path / "tree"
    root.mkdir()
    (root / ESC_NAME).write_text("import torch\n" + ESC_LINE)
    return root


def test_unit_terminal_and_one_line():
    assert one_line("a\x1b[31mb\x07c\nd\te\u202ef") == "a\\x1b[31mb\\x07c\\nd\\te\\u202ef"
    assert terminal("a\x1b]0;t\x07\nb\tc\r\nd\re") == "a\\x1b]0;t\\x07\nb\tc\r\nd\\re"
    assert terminal("\x1b[1mbold\x1b[0m \x1b]0;t\x07", styled=True) == "\x1b[1mbold\x1b[0m \\x1b]0;t\\x07"
    assert one_line(Styled("\x1b[32mok\x1b[0m")) == "\x1b[32mok\x1b[0m"  # accelport's own colour
    assert one_line("plain ascii") == "plain ascii" and one_line("ünïcode ok") == "ünïcode ok"


def test_unit_markdown_code_spans_hold_anything():
    assert markdown.code("a``b") == "```a``b```"
    assert markdown.code("`x") == "`` `x ``"
    assert markdown.code("a|b") == "`a\\|b`"
    assert markdown.code("<img src=x onerror=alert(1)>") == "`<img src=x onerror=alert(1)>`"
    assert markdown.code("x\ny\x1b") == "`x\\ny\\x1b`"
    assert markdown.code("") == ""


def test_unit_markdown_escape_leaves_no_markup():
    text = markdown.escape("<img src=x onerror=alert(1)> [a](javascript:x) *b* a|b `c` &amp;")
    assert "<" not in text and ">" not in text
    assert text == ("&lt;img src=x onerror=alert(1)&gt; \\[a\\](javascript:x) \\*b\\* a\\|b \\`c\\` &amp;amp;")


def test_inventory_table_and_csv_show_escapes_not_control_characters(cli, tree):
    table = cli("inventory", tree)
    assert table.code == 0, table.err
    _no_raw_controls(table.out + table.err)
    assert "evil\\x1b[31mred\\x1b]0;pwned\\x07" in table.out  # the name, escaped: nothing lost
    assert "\\x1b[2J" in table.out  # the source line too
    data = cli("inventory", tree, "--format", "csv")
    _no_raw_controls(data.out)
    rows = list(csv.DictReader(io.StringIO(data.out)))
    assert rows and all(r["path"].endswith("evil\\x1b[31mred\\x1b]0;pwned\\x07<img src=x onerror=alert(1)>.py") for r in rows)
    assert any("\\x1b[2J" in r["snippet"] for r in rows)


def test_inventory_markdown_and_html_keep_html_inert(cli, tree, tmp_path):
    md = cli("inventory", tree, "--format", "md")
    assert md.code == 0, md.err
    _no_raw_controls(md.out)
    _no_live_html(md.out)
    assert "`" in md.out and "<img src=x onerror=alert(1)>" in md.out  # shown, inside code spans
    html = cli("inventory", tree, "--format", "html").out
    assert "<img src=x" not in html and "<script>" not in html and "&lt;img src=x" in html


def test_compare_renderers_sanitize_module_names_and_source_lines(cli, tmp_path):
    import torch

    from accelport.verify import capture
    from accelport.verify.numerics import dumpfile

    dumps = []
    for name, scale in (("ref", 2.0), ("test", 2.5)):
        folder = tmp_path / name
        with capture(folder, step_on="manual"):
            torch.relu(torch.linspace(-2, 2, 64)) * scale
        manifest = folder / dumpfile.MANIFEST
        lines = manifest.read_text().splitlines()
        for index in range(1, len(lines) - 1):
            record = json.loads(lines[index])
            record["module"] = "Net.\x1b]0;pwned\x07<img src=x onerror=alert(1)>"
            record["line"] = ESC_NAME + ":3"
            lines[index] = json.dumps(record)
        manifest.write_text("\n".join(lines) + "\n")
        dumps.append(folder)
    for fmt in ("table", "csv", "markdown"):
        result = cli("compare", *dumps, "--format", fmt)
        assert result.code == 1, result.err
        _no_raw_controls(result.out + result.err)
        assert "\\x1b]0;pwned\\x07" in result.out
        if fmt == "markdown":
            _no_live_html(result.out)
    html = cli("compare", *dumps, "--format", "html").out
    assert "<img src=x" not in html


def test_error_lines_are_sanitized(cli, tmp_path):
    result = cli("compare", tmp_path / ESC_NAME, tmp_path / "x")
    assert result.code == 2
    _no_raw_controls(result.err.rstrip("\n"))
    assert "evil\\x1b[31mred" in result.err


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed; the diff is checked with `git apply`")
def test_a_diff_of_a_file_with_a_hostile_name_still_applies_with_git(cli, tree):
    diff = cli("migrate", tree / ESC_NAME)
    assert diff.code == 0, diff.err
    assert diff_path("a/x\ty") == '"a/x\\ty"'
    assert f'--- {diff_path("a/" + str(tree / ESC_NAME))}' in diff.out
    # The headers are quoted; the body is the file's own text, exact (as git's is), so that it applies.
    _no_raw_controls("".join(line for line in diff.out.splitlines(True) if line.startswith(("---", "+++"))))
    # `git apply` reads the quoted names; run it where the file lives, on a copy of the diff.
    patch = tree.parent / "change.patch"
    patch.write_text(diff.out.replace(str(tree) + "/", ""))
    done = subprocess.run(["git", "apply", "--unsafe-paths", "-p1", str(patch)], cwd=tree, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "torch.accelerator" in (tree / ESC_NAME).read_text()


def test_json_printed_raw_stays_valid_and_exact_through_the_terminal_sanitizer():
    """`ensure_ascii=False` JSON leaves DEL, C1 controls and bidi overrides raw; the sanitizer's
    escapes for them are JSON's own, so what is printed parses to the same value."""
    value = {"path": "a\x7fb\x85c\u202ed\u2066e", "plain": "ok"}
    printed = terminal(json.dumps(value, ensure_ascii=False))
    _no_raw_controls(printed)
    assert "\x85" not in printed and "\u202e" not in printed
    assert json.loads(printed) == value


def test_colour_stays_while_the_names_escape_sequences_do_not(cli, tree, monkeypatch):
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.delenv("NO_COLOR", raising=False)
    table = cli("inventory", tree).out
    assert "\x1b[1m" in table  # accelport's own bold
    assert "\x1b]0;pwned" not in table and "\x1b[2J" not in table and "\x07" not in table
    assert "evil\\x1b[31mred\\x1b]0;pwned\\x07" in table
