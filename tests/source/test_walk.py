"""File discovery: .gitignore and excludes, skipped folders, symlink loops, and every unscannable file reported with its reason."""

from __future__ import annotations

import os
import socket

import pytest

from accelport.inventory import scan

CUDA = "import torch\ntorch.cuda.synchronize()\n"


def _paths(report):
    return sorted({f.location.path for f in report.findings})


def test_gitignore_nested_and_negated(tmp_path):
    (tmp_path / ".gitignore").write_text("generated/\n*.tmp.py\n")
    (tmp_path / "generated").mkdir()
    (tmp_path / "generated" / "a.py").write_text(CUDA)
    (tmp_path / "keep.py").write_text(CUDA)
    (tmp_path / "x.tmp.py").write_text(CUDA)
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / ".gitignore").write_text("*.py\n!wanted.py\n")
    (sub / "ignored.py").write_text(CUDA)
    (sub / "wanted.py").write_text(CUDA)
    report = scan([str(tmp_path)], jobs=1)
    names = [os.path.relpath(p, tmp_path) for p in _paths(report)]
    assert names == ["keep.py", os.path.join("sub", "wanted.py")]
    everything = scan([str(tmp_path)], jobs=1, respect_gitignore=False)
    assert len(_paths(everything)) == 5


def test_pyproject_and_cli_excludes(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.accelport]\nexclude = ["third_party/**"]\n')
    for rel in ("third_party/vendored.py", "tests/test_x.py", "src/app.py"):
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(CUDA)
    report = scan([str(tmp_path)], jobs=1, excludes=["tests/"])
    assert [os.path.relpath(p, tmp_path) for p in _paths(report)] == [os.path.join("src", "app.py")]


def test_a_gitignore_line_git_cannot_parse_is_skipped_like_git_does(tmp_path):
    (tmp_path / ".gitignore").write_text("generated/\n[z-a]bad\ntrailing\\\n")
    (tmp_path / "generated").mkdir()
    (tmp_path / "generated" / "a.py").write_text(CUDA)
    (tmp_path / "keep.py").write_text(CUDA)
    report = scan([str(tmp_path)], jobs=1)
    assert [os.path.relpath(p, tmp_path) for p in _paths(report)] == ["keep.py"]


def test_vcs_virtualenv_and_site_packages_are_skipped(tmp_path):
    for rel in (".git/hooks/h.py", "venv/lib/x.py", "lib/site-packages/pkg/m.py", "node_modules/p/m.py", "app.py"):
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(CUDA)
    (tmp_path / "venv" / "pyvenv.cfg").write_text("home = /usr\n")
    report = scan([str(tmp_path)], jobs=1)
    assert [os.path.relpath(p, tmp_path) for p in _paths(report)] == ["app.py"]
    assert report.files_scanned == 1


def test_symlink_loops_are_survived(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text(CUDA)
    os.symlink(tmp_path, tmp_path / "pkg" / "loop")
    os.symlink(tmp_path / "pkg" / "m.py", tmp_path / "alias.py")
    report = scan([str(tmp_path)], jobs=1)
    assert report.files_scanned == 1  # the same file through a link is scanned once
    assert len(report.findings) == 1


def test_unscannable_files_are_reported_with_reasons(tmp_path):
    (tmp_path / "latin1.py").write_bytes(b"# caf\xe9\nimport torch\ntorch.cuda.synchronize()\n")
    (tmp_path / "binary.py").write_bytes(b"\x00\x01torch.cuda\x00")
    (tmp_path / "broken.py").write_text("import torch\ndef f(:\n    torch.cuda.synchronize()\n")
    (tmp_path / "big.py").write_text("# " + "x" * (2 * 1024 * 1024) + "\n")
    os.symlink(tmp_path / "missing.py", tmp_path / "dangling.py")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "socket.py"))  # never opened: only regular files are read
    try:
        report = scan([str(tmp_path)], jobs=1, max_file_size=1024 * 1024)
    finally:
        sock.close()
    reasons = {os.path.basename(s.path): s.reason for s in report.skipped}
    assert "not UTF-8" in reasons["latin1.py"]
    assert "binary content" in reasons["binary.py"]
    assert "does not parse as Python (line 2" in reasons["broken.py"]
    assert "larger than the 1 MiB limit" in reasons["big.py"] and reasons["big.py"].endswith("raise max_file_size to scan it")
    assert "broken symbolic link" in reasons["dangling.py"]
    assert reasons["socket.py"] == "not a regular file (a socket); skipped, never opened"
    assert report.files_scanned == 0


def test_declared_encoding_is_honoured(tmp_path):
    (tmp_path / "latin1.py").write_bytes(b"# -*- coding: latin-1 -*-\n# caf\xe9\nimport torch\ntorch.cuda.synchronize()\n")
    report = scan([str(tmp_path)], jobs=1)
    assert not report.skipped
    assert [f.rule_id for f in report.findings] == ["AP1103"]


def test_file_without_cuda_tokens_is_scanned_not_parsed(tmp_path):
    # A syntax error in a file with no CUDA token is not reported: the file is never parsed.
    (tmp_path / "plain.py").write_text("def broken(:\n    return 1\n")
    report = scan([str(tmp_path)], jobs=1)
    assert report.files_scanned == 1 and not report.skipped


def test_parallel_scan_equals_serial(tmp_path):
    for i in range(60):
        body = CUDA if i % 4 == 0 else "import os\n# torch.cuda in a comment\nx = 1\n"
        (tmp_path / f"m{i:02d}.py").write_text(body + "y = 2\n" * 20_000)
    serial = scan([str(tmp_path)], jobs=1)
    parallel = scan([str(tmp_path)], jobs=2)
    assert serial.to_dict() == parallel.to_dict()
    assert len(serial.findings) == 15


@pytest.mark.parametrize("listed", [0, 5, 4096])
def test_a_file_is_read_whole_whatever_size_discovery_saw(tmp_path, listed):
    # The scanner reads in one call sized from discovery's stat; a file that grew or
    # shrank since must still be read to its end.
    from accelport.source.walk import read_regular

    path = tmp_path / "grown.py"
    data = b"x = 1\n" * 50_000
    path.write_bytes(data)
    assert read_regular(str(path), listed) == data


def test_chunks_keep_every_file_in_order_and_shrink_towards_the_end():
    from accelport.inventory.engine import work_chunks
    from accelport.source.walk import Candidate

    files = [Candidate(f"f{i}.py", f"f{i}.py", 0, 1000 + (i % 7) * 300) for i in range(2000)]
    chunks = work_chunks(files, 2)
    assert [c for chunk in chunks for c in chunk] == files
    sizes = [sum(c.size for c in chunk) for chunk in chunks]
    total = sum(sizes)
    assert sizes[0] > total / 10 and max(sizes[-5:]) < total / 100  # big first, small last
    assert len(chunks) < 100
