"""Reading a dump is confined to its folder and checks every field: a hostile or damaged dump is one line, exit 2.

The manifest names tensor files and byte ranges; those are data, not paths to follow. Each
test plants one hostile value in a copy of a real dump (made by `capture` with full
tensors) and runs `accelport compare` on it in this process.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from accelport.verify import capture
from accelport.verify.numerics import dumpfile

SECRET = "TOPSECRET-DUMP-READING"


@pytest.fixture(scope="module")
def real_dump(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("dumps") / "ref"
    x = torch.linspace(-2, 2, 256)
    with capture(folder, step_on="manual", tensors=True):
        torch.relu(x) * 2
    return folder


@pytest.fixture
def copy(real_dump, tmp_path):
    """A copy of the real dump, and a function that rewrites record `index` (1: the first op) of its manifest."""
    target = tmp_path / "test"
    shutil.copytree(real_dump, target)

    def rewrite(index: int, change) -> Path:
        lines = (target / dumpfile.MANIFEST).read_text().splitlines()
        record = json.loads(lines[index])
        change(record)
        lines[index] = json.dumps(record)
        (target / dumpfile.MANIFEST).write_text("\n".join(lines) + "\n")
        return target

    return target, rewrite


def _one_line_exit_2(result, *needles: str) -> None:
    assert result.code == 2, (result.code, result.err)
    assert "Traceback" not in result.err and len(result.err.strip().splitlines()) == 1, result.err
    for needle in needles:
        assert needle in result.err, result.err
    assert SECRET not in result.out + result.err


def _set(path: str, value):
    def change(record):
        keys = path.split(".")
        obj = record
        for key in keys[:-1]:
            obj = obj[int(key)] if key.isdigit() else obj[key]
        obj[int(keys[-1]) if keys[-1].isdigit() else keys[-1]] = value

    return change


@pytest.fixture
def outside(tmp_path) -> Path:
    secret = tmp_path / "outside" / "secret.safetensors"
    secret.parent.mkdir()
    secret.write_text(SECRET * 100)
    return secret


@pytest.mark.parametrize("name", ["../../outside/secret.safetensors", "/etc/hostname", "tensors/../../x"])
def test_a_tensor_file_outside_the_folder_by_name_is_damage(cli, real_dump, copy, name):
    _, rewrite = copy
    test = rewrite(1, _set("out.0.file", name))
    _one_line_exit_2(cli("compare", real_dump, test), str(test / dumpfile.MANIFEST) + ":2", "damaged manifest: out[0].file")


def test_a_symlink_leading_out_of_the_folder_is_refused(cli, real_dump, copy, outside):
    test, rewrite = copy
    (test / "tensors" / "link.safetensors").symlink_to(outside)
    rewrite(1, _set("out.0.file", "tensors/link.safetensors"))
    _one_line_exit_2(cli("compare", real_dump, test), "link.safetensors", "leads outside the dump folder")


def test_a_symlink_inside_the_folder_is_followed(cli, real_dump, copy):
    test, rewrite = copy
    (test / "tensors" / "alias.safetensors").symlink_to("step000000.safetensors")
    rewrite(1, _set("out.0.file", "tensors/alias.safetensors"))
    assert cli("compare", real_dump, test).code == 0


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_tensor_file_that_is_not_a_regular_file_is_refused_without_blocking(cli, real_dump, copy, kind, fifo_watchdog):
    test, rewrite = copy
    special = test / "tensors" / "special.safetensors"
    os.mkfifo(special) if kind == "fifo" else special.mkdir()
    rewrite(1, _set("out.0.file", "tensors/special.safetensors"))
    with fifo_watchdog(special) as hung:
        result = cli("compare", real_dump, test)
    assert not hung.is_set(), "compare blocked on the FIFO"
    _one_line_exit_2(result, "special.safetensors", "not a regular file" if kind == "fifo" else "is a directory")


def test_a_manifest_that_is_a_fifo_is_refused_without_blocking(cli, real_dump, tmp_path, fifo_watchdog):
    folder = tmp_path / "fifo-dump"
    folder.mkdir()
    os.mkfifo(folder / dumpfile.MANIFEST)
    with fifo_watchdog(folder / dumpfile.MANIFEST) as hung:
        result = cli("compare", real_dump, folder)
    assert not hung.is_set(), "compare blocked on the FIFO"
    _one_line_exit_2(result, "manifest", "not a regular file")


def test_a_huge_nbytes_is_damage_and_allocates_nothing(cli, real_dump, copy):
    _, rewrite = copy
    test = rewrite(1, _set("out.0.nbytes", 2**40))
    _one_line_exit_2(cli("compare", real_dump, test), "damaged manifest: out[0].nbytes is 1099511627776")


def test_a_tensor_larger_than_its_file_is_cut_short_without_allocating_it(real_dump):
    from accelport.errors import UserError
    from accelport.verify.numerics.metrics import TensorFiles

    files = TensorFiles(real_dump)
    entry = {"file": "tensors/step000000.safetensors", "start": 0, "nbytes": 2**40, "dtype": "float32", "shape": [2**38]}
    try:
        with pytest.raises(UserError, match="tensor data cut short"):
            files.load(entry)  # a bytearray of 2**40 first would be a MemoryError
    finally:
        files.close()


@pytest.mark.parametrize(
    ("index", "field", "value", "message"),
    [
        (1, "step", "s", "step is \"s\", expected a whole number >= 0"),
        (1, "step", -1, "step is -1"),
        (1, "seq", 1.5, "seq is 1.5"),
        (1, "call", True, "call is true"),
        (1, "op", ["x"], "op is [\"x\"], expected a string"),
        (1, "module", {"a": 1}, "module is {\"a\": 1}"),
        (1, "in", "x", "in is \"x\", expected a list"),
        (1, "in", None, "in is null"),
        (1, "in.0", 5, "in[0] is 5, expected an object"),
        (1, "in.0.dtype", 32, "in[0].dtype is 32"),
        (1, "in.0.shape", "256", "in[0].shape is \"256\""),
        (1, "in.0.shape", [-1], "in[0].shape is [-1]"),
        (1, "in.0.stats", ["a", 0, 0, 0, 0, 0, 0, 0], "in[0].stats holds \"a\""),
        (1, "in.0.stats", [1.0], "in[0].stats is [1.0], expected null or 8 numbers"),
        (1, "in.0.start", "0", "in[0].start is \"0\""),
        (1, "in.0.file", 7, "in[0].file is 7"),
        (1, "out.0.src", -3, "out[0].src is -3"),
        (1, "k", 3, "k is 3, expected a string"),
    ],
)
def test_every_malformed_field_is_damaged_manifest_naming_file_line_and_field(cli, real_dump, copy, index, field, value, message):
    _, rewrite = copy
    test = rewrite(index, _set(field, value))
    _one_line_exit_2(cli("compare", real_dump, test), f"{test / dumpfile.MANIFEST}:{index + 1}: damaged manifest: {message}")


def test_a_record_that_is_not_an_object_is_damage(cli, real_dump, copy):
    test, _ = copy
    manifest = test / dumpfile.MANIFEST
    lines = manifest.read_text().splitlines()
    lines[1] = "[1, 2]"
    manifest.write_text("\n".join(lines) + "\n")
    _one_line_exit_2(cli("compare", real_dump, test), f"{manifest}:2: damaged manifest: record is [1, 2]")


@pytest.mark.parametrize(("field", "value"), [("version", "x"), ("version", True), ("machine", []), ("seeds", "s")])
def test_a_malformed_header_field_is_damage(cli, real_dump, copy, field, value):
    _, rewrite = copy
    test = rewrite(0, _set(field, value))
    _one_line_exit_2(cli("compare", real_dump, test), f"{test / dumpfile.MANIFEST}:1: damaged manifest: header field {field!r}")


def test_a_manifest_line_without_end_is_not_read_whole(cli, real_dump, tmp_path):
    folder = tmp_path / "sparse"
    folder.mkdir()
    with open(folder / dumpfile.MANIFEST, "wb") as handle:
        handle.truncate(1 << 36)  # 64 GiB of zeros, no newline: sparse, costs no disk
    _one_line_exit_2(cli("compare", real_dump, folder), "not an accelport dump header")


TRUNCATE_WHILE_READING = textwrap.dedent("""
    import json, os, sys
    from pathlib import Path
    from accelport.verify.numerics.metrics import TensorFiles

    folder = Path(sys.argv[1])
    path = folder / "tensors" / "step000000.safetensors"
    n = 1 << 20
    header = b'{"__metadata__":{}}'.ljust(24)
    path.parent.mkdir()
    with open(path, "wb") as handle:
        handle.write(len(header).to_bytes(8, "little") + header + b"\\0" * (4 * n))
    files = TensorFiles(folder)
    entry = {"file": "tensors/step000000.safetensors", "start": 0, "nbytes": 4 * n, "dtype": "float32", "shape": [n]}
    window = files.elements(entry, 0, n)
    os.truncate(path, 64)  # cut in place while the window is held: a mapping of it would now fault
    total = float(window.sum())
    print(json.dumps({"sum": total, "again": files.elements(entry, 0, n) is None}))
""")


def test_a_tensor_file_truncated_in_place_while_read_does_not_kill_the_reader(tmp_path):
    """Run in a child: with mmap the read after truncation is SIGBUS, which would take pytest down."""
    done = subprocess.run([sys.executable, "-c", TRUNCATE_WHILE_READING, str(tmp_path)],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, (done.returncode, done.stderr)
    assert json.loads(done.stdout) == {"sum": 0.0, "again": True}


def test_a_step_with_more_tensors_than_the_reserved_header_is_rebuilt_in_place(tmp_path):
    # The header outgrows its reservation: the file is copied behind a bigger one (through
    # fileio.atomic_open) and reads back whole, with no temporary file left beside it.
    import json as _json
    import struct

    from accelport.verify.numerics.dumpfile import TensorStore

    store = TensorStore(tmp_path)
    store._reserve = 256
    for index in range(20):
        store.add(0, f"tensor.{index}", "float32", [1], struct.pack("<f", float(index)))
    store.finish_step()
    path = store.folder / "step000000.safetensors"
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = _json.loads(data[8 : 8 + length])
    start, end = header["tensor.7"]["data_offsets"]
    assert struct.unpack("<f", data[8 + length + start : 8 + length + end]) == (7.0,)
    assert [p.name for p in store.folder.iterdir()] == ["step000000.safetensors"]
