"""`accelport migrate`: diff, check and write modes, git safety, the change list, selection, targets."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "legacy_cuda_app"
GIT_ENV = {
    "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com",
}


@pytest.fixture
def app(tmp_path) -> Path:
    target = tmp_path / "app"
    shutil.copytree(EXAMPLE, target, ignore=shutil.ignore_patterns("__pycache__"))
    return target


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env={**os.environ, **GIT_ENV})


@pytest.fixture
def repo(app) -> Path:
    git(app, "init", "-q")
    git(app, "add", "-A")
    git(app, "commit", "-qm", "legacy")
    return app


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file() and ".git" not in p.parts}


def test_diff_is_the_default_and_writes_nothing(cli, app):
    before = snapshot(app)
    result = cli("migrate", app)
    assert result.code == 0
    assert result.out.startswith(f"--- a/{app}/")
    assert '+DEVICE = torch.accelerator.current_accelerator() or torch.device("cpu")' in result.out
    assert "-    model = build_model().cuda()" in result.out and "+    model = build_model().to(device)" in result.out
    # Nothing was written, and the summary says so: "would", never "rewritten".
    assert "would change" in result.err and "would rewrite" in result.err and "nothing written" in result.err
    assert "rewritten" not in result.err
    assert snapshot(app) == before


def test_dry_run_and_write_wording(cli, repo, tmp_path):
    check = cli("migrate", repo, "--check").out.strip().splitlines()
    assert "would rewrite" in check[-1] and "rewritten" not in check[-1]
    assert any(": " in line and " to rewrite" in line for line in check)  # per file
    written = cli("migrate", repo, "--write", "--changes", tmp_path / "changes.json").out.strip().splitlines()
    assert "file(s) changed" in written[-1] and " rewritten" in written[-1] and "would" not in written[-1]


def test_select_ignore_and_fail_on_come_from_the_command_line_or_pyproject(cli, repo, tmp_path):
    everything = cli("migrate", repo, "--format", "json").out
    assert '"AP1004"' in everything or "AP1004" in everything
    ignored = cli("migrate", repo, "--format", "json", "--ignore", "AP1004").out
    assert '"rule_id": "AP1004"' not in ignored and '"rule_id": "AP1004"' in everything
    (repo / "pyproject.toml").write_text('[tool.accelport]\nignore = ["AP1004"]\n')
    from_file = cli("migrate", repo, "--format", "json").out
    assert '"rule_id": "AP1004"' not in from_file
    (repo / "pyproject.toml").write_text('[tool.accelport]\nnosuch = 1\n')
    bad = cli("migrate", repo)
    assert bad.code == 2 and "unknown key 'nosuch'" in bad.err and len(bad.err.strip().splitlines()) == 1
    (repo / "pyproject.toml").unlink()
    bad_id = cli("migrate", repo, "--ignore", "AP0")  # no rule starts with AP0
    assert bad_id.code == 2 and "--ignore AP0: not a rule ID" in bad_id.err


def test_check_fails_until_written_then_passes(cli, repo, tmp_path):
    check = cli("migrate", repo, "--check")
    assert check.code == 1
    assert "train.py" in check.out and "utils.py" in check.out
    written = cli("migrate", repo, "--write", "--changes", tmp_path / "changes.json")
    assert written.code == 0, written.err
    assert cli("migrate", repo, "--check").code == 0


def test_write_records_a_change_list(cli, repo, tmp_path):
    changes = tmp_path / "out" / "changes.json"
    assert cli("migrate", repo, "--write", "--changes", changes).code == 0
    data = json.loads(changes.read_text())
    assert data["schema"] == "accelport-migrate-changes-1"
    rows = [c for f in data["files"] for c in f["changes"]]
    cuda = next(c for c in rows if c["rule_id"] == "AP1004" and c["line"] == 57)
    assert cuda["action"] == "rewritten" and cuda["path"].endswith("train.py")
    assert cuda["before"] == "build_model().cuda()" and cuda["after"] == "build_model().to(device)"
    assert any(c["action"] == "marked" and c["rule_id"] == "AP1403" for c in rows)
    markdown = changes.with_suffix(".md").read_text()
    assert "| 57 | rewritten | AP1004 |" in markdown


def test_write_refuses_uncommitted_changes_unless_forced(cli, repo, tmp_path):
    train = repo / "train.py"
    train.write_text(train.read_text() + "\n# work in progress\n")
    before = snapshot(repo)
    refused = cli("migrate", repo, "--write", "--changes", "-")
    assert refused.code == 2
    assert "train.py: has uncommitted changes" in refused.err and refused.err.count("\n") == 1
    assert snapshot(repo) == before
    forced = cli("migrate", repo, "--write", "--force", "--changes", "-")
    assert forced.code == 0
    assert "# work in progress" in train.read_text() and ".to(device)" in train.read_text()


def test_write_refuses_a_dirty_tree_even_where_it_writes_nothing(cli, repo):
    (repo / "README.md").write_text("edited\n")
    refused = cli("migrate", repo, "--write", "--changes", "-")
    assert refused.code == 2 and "README.md: has uncommitted changes" in refused.err
    assert "DEVICE" not in (repo / "train.py").read_text()


@pytest.mark.parametrize("where", ["under_a_file", "a_directory", "md_is_a_directory"])
def test_write_refuses_an_unwritable_change_list_before_touching_sources(cli, repo, tmp_path, where):
    blocker = tmp_path / "blocker"
    if where == "under_a_file":
        blocker.write_text("a file, not a folder\n")
        changes = blocker / "changes.json"
    elif where == "a_directory":
        changes = tmp_path / "changes.json"
        changes.mkdir()
    else:
        changes = tmp_path / "changes.json"
        (tmp_path / "changes.md").mkdir()
    before = snapshot(repo)
    refused = cli("migrate", repo, "--write", "--changes", changes)
    assert refused.code == 2, refused.err
    assert "--changes " in refused.err and str(changes.with_suffix("")) in refused.err
    assert refused.err.count("\n") == 1 and "Traceback" not in refused.err
    assert snapshot(repo) == before


def test_a_change_list_that_fails_late_still_leaves_sources_alone(cli, repo, tmp_path, monkeypatch):
    """Should the path become unwritable after the early check, the staged change list still fails first."""
    import accelport.cli.migrate as command

    monkeypatch.setattr(command, "_check_writable", lambda path: None)
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a folder\n")
    before = snapshot(repo)
    refused = cli("migrate", repo, "--write", "--changes", blocker / "changes.json")
    assert refused.code == 2 and "--changes " in refused.err and "nothing was changed" in refused.err
    assert refused.err.count("\n") == 1
    assert snapshot(repo) == before
    assert list(tmp_path.glob("**/*.tmp")) == []


def test_write_outside_git_needs_force(cli, app):
    refused = cli("migrate", app, "--write", "--changes", "-")
    assert refused.code == 2 and "not in a git work tree" in refused.err
    assert refused.err.rstrip().endswith("commit it to git first or force the write (--force)")


def test_select_limits_the_rules(cli, app):
    result = cli("migrate", app / "utils.py", "--select", "AP1101", "--format", "json")
    data = json.loads(result.out)
    assert {c["rule_id"] for f in data["files"] for c in f["changes"]} == {"AP1101"}
    assert data["select"] == ["AP1101"]


def test_unknown_rule_or_vendor_is_a_usage_error(cli, app):
    bad_rule = cli("migrate", app, "--select", "XY12")
    assert bad_rule.code == 2 and "--select XY12" in bad_rule.err
    bad_vendor = cli("migrate", app, "--target", "nosuchvendor")
    assert bad_vendor.code == 2 and "unknown vendor" in bad_vendor.err
    missing = cli("migrate", app / "nope")
    assert missing.code == 2 and "no such file" in missing.err


def test_target_npu_adds_the_adapter_import(cli, app):
    result = cli("migrate", app / "train.py", "--target", "npu")
    assert "+    import torch_npu  # noqa: F401" in result.out
    assert '"npu"' not in result.out


def test_exclude_leaves_files_out(cli, app):
    result = cli("migrate", app, "--exclude", "utils.py", "--format", "json")
    paths = [f["path"] for f in json.loads(result.out)["files"]]
    assert paths and not any(p.endswith("utils.py") for p in paths)


def test_pre_commit_hook_runs_check():
    hooks = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
    hook = next(h for h in hooks if h["id"] == "accelport-migrate-check")
    assert hook["entry"] == "accelport migrate --check"
    assert hook["language"] == "python" and hook["types"] == ["python"]


@pytest.mark.parametrize("jobs", ["0", "-1", "two"])
def test_jobs_must_be_a_positive_count(cli, app, jobs):
    result = cli("migrate", app, "--check", "--jobs", jobs)
    assert result.code == 2 and "--jobs" in result.err and "Traceback" not in result.err


@pytest.mark.parametrize(
    ("pattern", "why"),
    [("\\", "not a valid gitignore-style pattern"), ("**/[z-a].py", "not a valid gitignore-style pattern"),
     ("", "matches nothing"), ("# train.py", "matches nothing")],
)
def test_an_exclude_that_cannot_work_is_refused(cli, repo, pattern, why):
    before = snapshot(repo)
    result = cli("migrate", repo, "--write", "--changes", "-", "--exclude", pattern)
    assert result.code == 2
    assert f"--exclude {pattern!r}: {why}" in result.err and result.err.count("\n") == 1
    assert snapshot(repo) == before


def test_an_exclude_in_pyproject_that_cannot_work_is_refused(cli, app):
    (app / "pyproject.toml").write_text('[tool.accelport]\nexclude = ["csrc/\\\\"]\n')
    result = cli("migrate", app, "--check")
    assert result.code == 2
    assert "pyproject.toml: [tool.accelport] exclude 'csrc/\\\\': not a valid gitignore-style pattern" in result.err


def test_json_changes_document_holds_exactly_the_result(tmp_path):
    # The document is written in compact lines for speed: parsed, it must be the result's
    # dict itself, with files that changed, files with errors and files that are not Python.
    from accelport.migrate import migrate
    from accelport.migrate.render import render_json

    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLE, repo)
    (repo / "broken.py").write_text("import torch\nx = torch.cuda.current_device(\n")
    result = migrate([str(repo)], jobs=1)
    assert result.changed_files and result.not_python and result.skipped
    text = render_json(result)
    assert json.loads(text) == result.to_dict()
    assert text.endswith("}\n") and "\n  \"files\": [\n    {" in text
