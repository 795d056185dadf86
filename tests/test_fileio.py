"""fileio: every write is whole or absent, whichever writer makes it."""

from __future__ import annotations

import pytest

from accelport.fileio import atomic_open, atomic_path, atomic_write_text, staged_writes


def test_atomic_open_keeps_the_old_file_when_the_writer_fails(tmp_path):
    target = tmp_path / "report.json"
    atomic_write_text(target, "old")
    with pytest.raises(RuntimeError), atomic_open(target) as handle:
        handle.write("half of the new")
        raise RuntimeError("killed")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]  # no temporary file left behind


def test_atomic_path_renames_what_a_tool_wrote_and_nothing_else(tmp_path):
    target = tmp_path / "sub" / "trace.json"
    with atomic_path(target) as tmp:
        assert tmp.parent == target.parent and tmp != target
        tmp.write_text("whole")  # what a tool writing by file name does
        assert not target.exists()  # invisible until the block ends
    assert target.read_text() == "whole"
    with pytest.raises(OSError), atomic_path(target) as tmp:
        tmp.write_text("half")
        raise OSError("the tool failed")
    assert target.read_text() == "whole"
    with atomic_path(target):
        pass  # the tool wrote nothing
    assert target.read_text() == "whole"
    assert sorted(p.name for p in target.parent.iterdir()) == ["trace.json"]


def test_staged_writes_change_every_target_or_none(tmp_path):
    old, new = tmp_path / "old.sh", tmp_path / "new.txt"
    old.write_text("before\n")
    old.chmod(0o755)
    with pytest.raises(RuntimeError), staged_writes(".x.tmp") as staging:
        staging.stage(old, b"after\n")
        staging.stage(new, b"fresh\n")
        assert len(list(tmp_path.glob(".old.sh.*.x.tmp"))) == len(list(tmp_path.glob(".new.txt.*.x.tmp"))) == 1
        raise RuntimeError("a check after staging failed")
    assert old.read_text() == "before\n" and not new.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.sh"]  # no temporary file left
    with staged_writes(".x.tmp") as staging:
        staging.stage(old, b"after\n")
        staging.stage(new, b"fresh\n")
        assert old.read_text() == "before\n"  # nothing renamed until the block ends
    assert old.read_text() == "after\n" and new.read_text() == "fresh\n"
    assert old.stat().st_mode & 0o777 == 0o755 and new.stat().st_mode & 0o777 == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new.txt", "old.sh"]


def test_staged_writes_remove_what_they_could_not_rename(tmp_path):
    (tmp_path / "folder").mkdir()
    with pytest.raises(OSError), staged_writes() as staging:
        staging.stage(tmp_path / "a.txt", b"a")
        staging.stage(tmp_path / "folder", b"a file cannot replace a folder")
    assert (tmp_path / "a.txt").read_bytes() == b"a"  # renamed before the one that failed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "folder"]
