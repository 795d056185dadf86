"""migrate and inventory on awkward trees: links leading out of the tree, FIFOs and sockets, a killed --write."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from accelport.errors import UserError
from accelport.migrate import migrate
from accelport.migrate.writing import write_files

CUDA = "import torch\ntorch.cuda.synchronize()\n"
GIT_ENV = {
    "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com",
}
REPO = Path(__file__).resolve().parents[2]


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env={**os.environ, **GIT_ENV})


@pytest.fixture
def tree_with_links_out(tmp_path) -> tuple[Path, Path, Path]:
    """A committed git tree `repo` holding a link to a file outside it and a linked folder outside it."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "shared.py").write_text(CUDA)
    (outside / "pkg").mkdir()
    (outside / "pkg" / "deep.py").write_text(CUDA)
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "own.py").write_text(CUDA)
    (repo / "shared.py").symlink_to(outside / "shared.py")
    (repo / "vendored").symlink_to(outside / "pkg")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "tree")
    return repo, outside, tmp_path


def test_write_leaves_files_behind_links_out_of_the_tree_byte_identical_and_says_so(cli, tree_with_links_out):
    repo, outside, tmp_path = tree_with_links_out
    before = {p: p.read_bytes() for p in (outside / "shared.py", outside / "pkg" / "deep.py")}
    done = cli("migrate", "--write", "--changes", tmp_path / "changes.json", repo)
    assert done.code == 1, done.err  # something was left alone: not a success
    assert {p: p.read_bytes() for p in before} == before
    assert "torch.accelerator.synchronize()" in (repo / "own.py").read_text()  # the tree's own file is migrated
    assert (repo / "shared.py").is_symlink() and (repo / "vendored").is_symlink()
    skipped = {Path(s["path"]).name: s["reason"] for s in json.loads((tmp_path / "changes.json").read_text())["skipped"]}
    assert set(skipped) == {"shared.py", "deep.py"}
    assert str((outside / "shared.py").resolve()) in skipped["shared.py"]
    assert "outside the tree" in skipped["deep.py"]
    assert "outside the tree" in done.out


def test_diff_shows_no_change_for_a_file_behind_a_link_out_of_the_tree(cli, tree_with_links_out):
    repo, _outside, _tmp = tree_with_links_out
    done = cli("migrate", repo)
    assert "+++ b/" + str(repo / "own.py") in done.out
    assert "shared.py" not in done.out and "deep.py" not in done.out
    assert done.code == 1


def test_a_link_inside_the_tree_is_still_followed(tmp_path):
    (tmp_path / "real.py").write_text(CUDA)
    (tmp_path / "alias").mkdir()
    (tmp_path / "alias" / "link.py").symlink_to(tmp_path / "real.py")
    result = migrate([str(tmp_path / "alias"), str(tmp_path)], jobs=1)
    assert not result.skipped  # reached through the link first, kept by the way that stays inside a tree
    write_files(result.files, [str(tmp_path / "alias"), str(tmp_path)])
    assert "torch.accelerator.synchronize()" in (tmp_path / "real.py").read_text()


def test_a_link_turned_outwards_after_discovery_stops_the_write(tmp_path):
    tree, elsewhere = tmp_path / "tree", tmp_path / "elsewhere.py"
    tree.mkdir()
    (tree / "m.py").write_text(CUDA)
    elsewhere.write_text(CUDA)
    result = migrate([str(tree)], jobs=1)
    (tree / "m.py").unlink()
    (tree / "m.py").symlink_to(elsewhere)
    with pytest.raises(UserError, match="outside the tree being migrated; nothing was written"):
        write_files(result.files, [str(tree)])
    assert elsewhere.read_text() == CUDA


def test_the_git_guard_checks_the_file_a_link_leads_to(cli, tmp_path):
    """A named file that links out of git: git cannot undo that write, so --force is needed."""
    outside = tmp_path / "nogit.py"
    outside.write_text(CUDA)
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "link.py").symlink_to(outside)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "tree")
    done = cli("migrate", "--write", "--changes", "-", repo / "link.py")
    assert done.code == 2 and "not in a git work tree" in done.err
    assert outside.read_text() == CUDA


def _fifo(path: Path) -> None:
    if not hasattr(os, "mkfifo"):
        pytest.skip("this platform has no FIFOs (os.mkfifo)")
    os.mkfifo(path)


def accelport(*args: str) -> subprocess.CompletedProcess:
    """The CLI in a child process: a reader that opened a FIFO would block until a writer came,
    and the timeout turns that hang into a failure."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    return subprocess.run([sys.executable, "-m", "accelport", *args], capture_output=True, text=True, timeout=60, env=env)


@pytest.mark.parametrize("command", ["inventory", "migrate"])
def test_a_fifo_named_like_source_neither_hangs_nor_is_opened(tmp_path, command):
    (tmp_path / "own.py").write_text(CUDA)
    _fifo(tmp_path / "x.py")
    (tmp_path / "link.py").symlink_to(tmp_path / "x.py")
    _fifo(tmp_path / ".gitignore")
    done = accelport(command, "--format", "json", str(tmp_path))
    assert done.returncode == 1, done.stderr
    skipped = {Path(s["path"]).name: s["reason"] for s in json.loads(done.stdout)["skipped"]}
    assert skipped["x.py"].startswith("not a regular file (a FIFO")
    assert skipped["link.py"].startswith("not a regular file (a FIFO")
    assert "own.py" not in skipped


def test_a_fifo_given_as_the_path_is_one_clear_line(tmp_path):
    _fifo(tmp_path / "x.py")
    done = accelport("migrate", str(tmp_path / "x.py"))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].endswith("is a FIFO (named pipe), not a source file or folder; pass a folder or a source file")


def test_write_removes_temporary_files_a_killed_run_left(cli, tmp_path):
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "m.py").write_text(CUDA)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "tree")
    # What write_files stages before its renames, as a killed run leaves it.
    stale = [repo / "pkg" / ".m.py.k2j4x_9a.accelport.tmp", repo / ".other.py.abcdefgh.accelport.tmp"]
    for path in stale:
        path.write_text("half written")
    kept = [repo / "notes.accelport.tmp", repo / ".m.py.short.accelport.tmp"]  # not named the way migrate names them
    for path in kept:
        path.write_text("the user's")

    assert cli("migrate", "--check", repo).code == 1
    assert all(p.exists() for p in stale)  # only a run that writes removes anything

    done = cli("migrate", "--write", "--changes", "-", repo)
    assert done.code == 0, done.err
    assert not any(p.exists() for p in stale)
    assert all(p.read_text() == "the user's" for p in kept)
    assert "removed 2 temporary file(s)" in done.err
    assert not list(repo.rglob("*.accelport.tmp*")) or {p.name for p in repo.rglob("*.accelport.tmp")} == {p.name for p in kept}
