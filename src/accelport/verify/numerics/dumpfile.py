"""The numerics dump on disk: a JSONL manifest flushed as the run goes, full tensors in per-step safetensors files.

Layout of a dump folder:

    manifest.jsonl                   {"k": "header", ...} first, then one record per line, {"k": "end"} last
    tensors/step000000.safetensors   only with full tensors: one file per step

The manifest is append-only and flushed in batches while the run goes, so a
killed run leaves every record up to the last flush readable; a missing
`end` record (or a half-written last line) marks the dump as truncated.

Tensor files follow the safetensors layout (8-byte little-endian header
length, JSON header, raw little-endian data) so any safetensors reader can open
a finished step file. The header space is reserved up front and the data is
appended behind it, so tensors stream to disk as they are produced; every
record also carries its tensor's offset, so a step file left without its
header by a crash is still readable through the manifest.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from accelport.errors import UserError
from accelport.fileio import atomic_open, open_regular

log = logging.getLogger(__name__)

FORMAT = "accelport-dump"
VERSION = 1
MANIFEST = "manifest.jsonl"
TENSOR_DIR = "tensors"

# Order of the numbers in a record's "stats" list. Statistics are over the finite
# elements; nan/inf/zero are element counts.
STAT_FIELDS = ("min", "max", "mean", "l2", "abs_mean", "nan", "inf", "zero")

# torch dtype name -> (safetensors dtype code, bytes per element)
DTYPES: dict[str, tuple[str, int]] = {
    "float64": ("F64", 8),
    "float32": ("F32", 4),
    "float16": ("F16", 2),
    "bfloat16": ("BF16", 2),
    "int64": ("I64", 8),
    "int32": ("I32", 4),
    "int16": ("I16", 2),
    "int8": ("I8", 1),
    "uint8": ("U8", 1),
    "bool": ("BOOL", 1),
}


def json_default(value: Any) -> Any:
    """Non-finite floats and other odd values as JSON that every parser accepts."""
    return repr(value)


# One encoder for every record: json.dumps with options builds a new one per call.
_ENCODER = json.JSONEncoder(separators=(",", ":"), default=json_default)


@functools.cache
def _lines_encoder() -> tuple[Any, tuple[type[Exception], ...]]:
    """msgspec's JSON-lines encoder and the errors it raises, where msgspec is installed (a
    tenth of json's cost per record); (None, ()) without it."""
    try:
        import msgspec
    except ImportError:
        return None, ()
    return msgspec.json.Encoder(enc_hook=json_default).encode_lines, (TypeError, ValueError, msgspec.EncodeError)


def clean_float(value: float) -> float | str:
    """JSON has no NaN or Infinity: write them as strings that `float()` reads back."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)  # 'nan', 'inf', '-inf'
    return value


def json_safe(value: Any) -> Any:
    """A structure with every non-finite float replaced by its string ('nan', 'inf', '-inf')."""
    if isinstance(value, float):
        return clean_float(value)
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def as_float(value: Any) -> float:
    return float(value) if value is not None else math.nan


class ManifestWriter:
    """Appends records to manifest.jsonl; `flush()` makes everything written so far survive a kill."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / MANIFEST
        try:
            self._file = open(self.path, "x", encoding="utf-8")  # noqa: SIM115 - lives as long as the capture
        except FileExistsError:
            raise UserError(
                f"{self.path}: a dump is already there; choose an empty -o folder or remove it"
            ) from None
        self.records = 0

    def write(self, record: dict[str, Any]) -> None:
        self._file.write(_ENCODER.encode(record))
        self._file.write("\n")
        self.records += 1

    def write_many(self, records: list[dict[str, Any]]) -> None:
        """Several records in one write (a flush of the capture); their floats must be finite."""
        if not records:
            return
        encode_lines, refused = _lines_encoder()
        text = None
        if encode_lines is not None:
            try:
                text = encode_lines(records).decode("utf-8")
            except refused:  # something msgspec does not take (a non-str key)
                text = None
        if text is None:
            encode = _ENCODER.encode
            text = "\n".join([encode(r) for r in records]) + "\n"
        self._file.write(text)
        self.records += len(records)

    def flush(self) -> None:
        self._file.flush()

    def close(self, fsync: bool = True) -> None:
        if self._file.closed:
            return
        self._file.flush()
        if fsync:
            os.fsync(self._file.fileno())
        self._file.close()


class TensorStore:
    """Streams tensors into one safetensors file per step."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder / TENSOR_DIR
        self.folder.mkdir(parents=True, exist_ok=True)
        self._reserve = 64 * 1024  # header bytes kept free at the start of the next file
        self._step: int | None = None
        self._file: BinaryIO | None = None
        self._entries: dict[str, dict[str, Any]] = {}
        self._end = 0  # bytes of data written so far in the current file

    @staticmethod
    def relative_name(step: int) -> str:
        return f"{TENSOR_DIR}/step{step:06d}.safetensors"

    def add(
        self, step: int, key: str, dtype: str, shape: list[int], data: memoryview | bytes
    ) -> tuple[str, int, int]:
        """Append one tensor's bytes; returns (file relative to the dump, offset in the data section, nbytes)."""
        if step != self._step:
            self.finish_step()
            self._open(step)
        assert self._file is not None
        nbytes = len(data) if isinstance(data, bytes) else data.nbytes
        start = self._end
        self._file.write(data)
        self._entries[key] = {
            "dtype": DTYPES[dtype][0],
            "shape": list(shape),
            "data_offsets": [start, start + nbytes],
        }
        self._end += nbytes
        return self.relative_name(step), start, nbytes

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()

    def _open(self, step: int) -> None:
        self._file = open(self.folder / f"step{step:06d}.safetensors", "wb")  # noqa: SIM115 - closed by finish_step
        # While the step is written the file already is a valid safetensors file (with no
        # tensors yet), and its header length says where the data starts.
        self._file.write(_header_block({"__metadata__": {"state": "writing"}}, self._reserve))
        self._step = step
        self._entries = {}
        self._end = 0

    def finish_step(self) -> None:
        """Write the real header into the reserved space, or rebuild the file when it does not fit."""
        if self._file is None:
            return
        self._entries["__metadata__"] = {"format": FORMAT, "step": str(self._step)}
        header = json.dumps(self._entries, separators=(",", ":")).encode("utf-8")
        path = Path(self._file.name)
        if len(header) <= self._reserve:
            self._file.flush()
            self._file.seek(0)
            self._file.write(_header_block(self._entries, self._reserve))
            self._file.close()
        else:
            # More tensors than the reservation holds: copy the data behind a bigger header.
            # Offsets in the manifest are relative to the data section, so they stay right.
            self._file.close()
            size = len(header) + 1024
            with atomic_open(path, "wb", encoding=None) as dst, open(path, "rb") as src:
                (length,) = struct.unpack("<Q", src.read(8))
                src.seek(8 + length)
                dst.write(_header_block(self._entries, size))
                while chunk := src.read(16 << 20):
                    dst.write(chunk)
        self._reserve = max(self._reserve, 2 * len(header))
        self._file = None
        self._step = None

    def close(self) -> None:
        self.finish_step()


def _header_block(header: dict[str, Any], size: int) -> bytes:
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    # safetensors allows the header to be padded with spaces; keep the data 8-byte aligned.
    size = max(size, len(text))
    size += (-size) % 8
    return struct.pack("<Q", size) + text + b" " * (size - len(text))


def data_start(path: Path, handle: int | None = None) -> int:
    """Where the data section of a tensor file starts (the file is read through `handle` when given)."""
    if handle is None:
        with open(path, "rb") as file:
            raw = file.read(8)
            size = os.fstat(file.fileno()).st_size
    else:
        raw = os.pread(handle, 8, 0)
        size = os.fstat(handle).st_size
    if len(raw) < 8:
        raise UserError(
            f"{path}: tensor file is cut short; the dump was interrupted before its first tensor"
        )
    start = 8 + struct.unpack("<Q", raw)[0]
    if start > size:
        raise UserError(
            f"{path}: tensor file header claims {start - 8} bytes but the file has {size}; the file is damaged"
        )
    return start


@dataclass
class DumpInfo:
    """What a reader learned about a dump besides its records."""

    path: Path
    header: dict[str, Any]
    records: int = 0
    truncated: bool = False
    truncated_reason: str = ""
    end: dict[str, Any] = field(default_factory=dict)


# One manifest line (the header, or a record with its arguments) is far smaller; a longer
# line is damage (or a file that is not a manifest), and is not read whole into memory.
MAX_LINE_BYTES = 64 << 20
_DAMAGED = "the dump is damaged; make it again with `accelport dump`"


def manifest_path(dump: Path) -> Path:
    dump = Path(dump)
    if dump.is_file():
        return dump
    return dump / MANIFEST


def dump_folder(dump: Path) -> Path:
    """The folder every file of a dump must lie in (symbolic links resolved)."""
    dump = Path(dump)
    return (dump.parent if dump.is_file() else dump).resolve()


def open_inside(folder: Path, name: str, what: str) -> int:
    """A read-only descriptor of `folder/name`, which must resolve to a regular file inside `folder`.

    A name from a manifest is data, not a path to follow anywhere: one that leads out of the
    dump (`..`, an absolute path, a symbolic link pointing elsewhere) or to a FIFO, device or
    folder is refused, so reading a dump never reads another file or blocks.
    """
    path = folder / name
    try:
        resolved = path.resolve()
    except (OSError, RuntimeError) as exc:  # a symlink loop
        raise UserError(f"{path}: {what} cannot be resolved ({exc}); {_DAMAGED}") from None
    if not resolved.is_relative_to(folder):
        raise UserError(f"{path}: {what} leads outside the dump folder {folder}; refusing to read it ({_DAMAGED})")
    return open_regular(resolved, what, _DAMAGED, shown=path,
                        missing=f"{path}: {what} missing; the dump is incomplete (copy the whole folder)")


def _open_manifest(dump: Path) -> tuple[Path, BinaryIO]:
    path = manifest_path(dump)
    if not path.exists():
        raise UserError(
            f"{dump}: not an accelport dump (no {MANIFEST}); make one with `accelport dump`"
        )
    fd = open_inside(dump_folder(dump), path.name, "manifest")
    return path, os.fdopen(fd, "rb")


def read_header(dump: Path) -> dict[str, Any]:
    path, handle = _open_manifest(dump)
    with handle:
        return _parse_header(path, handle.readline(MAX_LINE_BYTES))


def _parse_header(path: Path, first: bytes) -> dict[str, Any]:
    try:
        header = json.loads(first)
    except ValueError:
        header = None
    if (
        not isinstance(header, dict)
        or header.get("k") != "header"
        or header.get("format") != FORMAT
    ):
        raise UserError(
            f"{path}: first line is not an accelport dump header; point at a folder made by `accelport dump`"
        )
    for key, kinds in _HEADER_FIELDS.items():
        if key in header and not isinstance(header[key], kinds):
            raise UserError(f"{path}:1: damaged manifest: header field {key!r} is {_shown(header[key])}, "
                            f"expected {_kinds_text(kinds)}; {_DAMAGED}")  # fmt: skip
    version = header.get("version", 0)
    if isinstance(version, bool):
        raise UserError(f"{path}:1: damaged manifest: header field 'version' is {_shown(version)}, expected a whole number; {_DAMAGED}")
    if version > VERSION:
        raise UserError(
            f"{path}: dump format {header.get('version')} is newer than this accelport reads ({VERSION}); upgrade accelport"
        )
    return header


# Header fields readers use, and the JSON types they must have when present.
_HEADER_FIELDS: dict[str, tuple[type, ...]] = {
    "version": (int,), "mode": (str,), "created": (str,), "machine": (dict,), "seeds": (dict,),
    "determinism": (dict,), "argv": (list,), "stat_fields": (list,), "steps": (list,),
}  # fmt: skip


def _kinds_text(kinds: tuple[type, ...]) -> str:
    names = {int: "a whole number", str: "a string", dict: "an object", list: "a list", float: "a number",
             type(None): "null", bool: "true or false"}  # fmt: skip
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def _shown(value: Any) -> str:
    text = json.dumps(value, default=repr)
    return text if len(text) <= 40 else text[:37] + "..."


class _Damaged(Exception):
    """A field of a record that readers cannot use: (field, what is wrong)."""


def _whole(value: Any, field: str, optional: bool = False) -> None:
    if value is None and optional:
        return
    if type(value) is not int or value < 0:
        raise _Damaged(field, f"is {_shown(value)}, expected a whole number >= 0")


def _text(value: Any, field: str, optional: bool = False) -> None:
    if type(value) is not str and not (value is None and optional):
        raise _Damaged(field, f"is {_shown(value)}, expected a string")


_STAT_WORDS = frozenset({"nan", "inf", "-inf"})


def _check_tensor(entry: Any, field: str) -> None:
    if type(entry) is not dict:
        raise _Damaged(field, f"is {_shown(entry)}, expected an object (a tensor description)")
    dtype = entry.get("dtype")
    _text(dtype, f"{field}.dtype")
    shape = entry.get("shape")
    if type(shape) is not list:
        raise _Damaged(f"{field}.shape", f"is {_shown(shape)}, expected a list of sizes")
    for size in shape:
        if type(size) is not int or size < 0:
            raise _Damaged(f"{field}.shape", f"is {_shown(shape)}, expected a list of whole numbers >= 0")
    stats = entry.get("stats")
    if stats is not None:
        if type(stats) is not list or len(stats) != len(STAT_FIELDS):
            raise _Damaged(f"{field}.stats", f"is {_shown(stats)}, expected null or {len(STAT_FIELDS)} numbers")
        for value in stats:
            kind = type(value)
            if kind is not float and kind is not int and not (kind is str and value in _STAT_WORDS):
                raise _Damaged(f"{field}.stats", f"holds {_shown(value)}, expected numbers ('nan', 'inf', '-inf' as strings)")
    if "src" in entry:
        _whole(entry["src"], f"{field}.src", optional=True)
    if "crc32" in entry:
        _whole(entry["crc32"], f"{field}.crc32")
    if "file" in entry or "start" in entry or "nbytes" in entry:
        name = entry.get("file")
        _text(name, f"{field}.file")
        if not name or name.startswith(("/", "\\")) or "\0" in name or ".." in name.replace("\\", "/").split("/"):
            raise _Damaged(f"{field}.file", f"is {_shown(name)}, expected a path inside the dump folder (like tensors/step000000.safetensors)")
        _whole(entry.get("start"), f"{field}.start")
        nbytes = entry.get("nbytes")
        _whole(nbytes, f"{field}.nbytes")
        known = DTYPES.get(dtype)
        if known is not None and nbytes != math.prod(shape) * known[1]:
            raise _Damaged(f"{field}.nbytes", f"is {nbytes}, but shape {shape} of {dtype} holds {math.prod(shape) * known[1]} bytes")


_PLAIN_ENTRY_KEYS = frozenset({"dtype", "shape", "stats", "src"})


def _plain(record: Any) -> bool:
    """True for a well-formed record of the common shape (a statistics-only op): checked inline,
    a third of `check_record`'s cost. Anything else (a step, a saved tensor, an odd value) goes
    to `check_record`, which names the field when one is wrong."""
    if type(record) is not dict or record.get("k") != "op" or "node" in record:
        return False
    seq, step, call = record.get("seq"), record.get("step"), record.get("call")
    if type(seq) is not int or type(step) is not int or type(call) is not int or seq < 0 or step < 0 or call < 0:
        return False
    if type(record.get("op")) is not str or type(record.get("module")) is not str or type(record.get("phase")) is not str:
        return False
    line, args = record.get("line"), record.get("args")
    if (line is not None and type(line) is not str) or (args is not None and type(args) is not dict):
        return False
    for side in ("in", "out"):
        entries = record.get(side)
        if type(entries) is not list:
            return False
        for entry in entries:
            if type(entry) is not dict or not _PLAIN_ENTRY_KEYS.issuperset(entry) or type(entry.get("dtype")) is not str:
                return False
            shape = entry.get("shape")
            if type(shape) is not list:
                return False
            for size in shape:
                if type(size) is not int or size < 0:
                    return False
            stats = entry.get("stats")
            if stats is not None:
                if type(stats) is not list or len(stats) != len(STAT_FIELDS):
                    return False
                for value in stats:
                    if type(value) is not float and type(value) is not int:
                        return False
            src = entry.get("src")
            if src is not None and (type(src) is not int or src < 0):
                return False
    return True


def check_record(record: Any) -> None:
    """Raise `_Damaged(field, problem)` for the first field of `record` that readers cannot use."""
    if type(record) is not dict:
        raise _Damaged("record", f"is {_shown(record)}, expected a JSON object")
    kind = record.get("k")
    _text(kind, "k")
    if kind == "end":
        return
    if "step" in record:
        _whole(record["step"], "step")
    if kind == "step":
        autocast = record.get("autocast")
        if autocast is not None and (type(autocast) is not dict or not all(type(v) is str for v in autocast.values())):
            raise _Damaged("autocast", f"is {_shown(autocast)}, expected an object of dtype names")
        return
    _whole(record.get("seq"), "seq", optional=True)
    _whole(record.get("call"), "call", optional=True)
    _text(record.get("op"), "op", optional=True)
    _text(record.get("module"), "module", optional=True)
    _text(record.get("phase"), "phase", optional=True)
    _text(record.get("line"), "line", optional=True)
    _text(record.get("node"), "node", optional=True)
    args = record.get("args")
    if args is not None and type(args) is not dict:
        raise _Damaged("args", f"is {_shown(args)}, expected an object")
    for side in ("in", "out"):
        if side not in record:
            continue
        entries = record[side]
        if type(entries) is not list:
            raise _Damaged(side, f"is {_shown(entries)}, expected a list of tensor descriptions")
        for index, entry in enumerate(entries):
            _check_tensor(entry, f"{side}[{index}]")


def iter_records(dump: Path, info: DumpInfo | None = None) -> Iterator[dict[str, Any]]:
    """Records of a dump in execution order, streamed; fills `info` (truncation, end record) as it goes.

    Every record is checked field by field (`check_record`) before a reader sees it: a field
    of the wrong type or range is a UserError "damaged manifest: FIELD ..." naming the file
    and line, never a failure somewhere downstream.
    """
    path, handle = _open_manifest(dump)
    with handle:
        header = _parse_header(path, handle.readline(MAX_LINE_BYTES))
        if info is not None:
            info.header = header
        line_no = 1
        pending: bytes | None = None
        readline = handle.readline
        while raw := readline(MAX_LINE_BYTES):
            line_no += 1
            if pending is not None:
                # The bad line was not the last one: the file is damaged, not just cut short.
                raise UserError(
                    f"{path}:{line_no - 1}: unreadable record in the middle of the dump; the file is damaged"
                )
            if not raw.endswith(b"\n"):
                if len(raw) >= MAX_LINE_BYTES:
                    raise UserError(f"{path}:{line_no}: damaged manifest: a line longer than {MAX_LINE_BYTES >> 20} MiB; {_DAMAGED}")
                pending = raw
                continue
            try:
                record = json.loads(raw)
            except ValueError:
                pending = raw
                continue
            try:
                if not _plain(record):
                    check_record(record)
            except _Damaged as exc:
                field, problem = exc.args
                raise UserError(f"{path}:{line_no}: damaged manifest: {field} {problem}; {_DAMAGED}") from None
            if record.get("k") == "end":
                if info is not None:
                    info.end = record
                return
            if info is not None:
                info.records += 1
            yield record
        if info is not None:
            info.truncated = True
            info.truncated_reason = (
                f"the last line is cut off after {info.records} records"
                if pending
                else f"no end record after {info.records} records"
            )


def open_dump(dump: Path) -> DumpInfo:
    """Check that `dump` is readable and return its header (records are read with `iter_records`)."""
    return DumpInfo(path=Path(dump), header=read_header(dump))
