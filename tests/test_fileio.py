"""fileio: every write is whole or absent, whichever writer makes it."""

from __future__ import annotations

import pytest

from accelport.fileio import atomic_open, atomic_path, atomic_write_text


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
