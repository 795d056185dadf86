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
            tmp = path.with_name(path.name + ".tmp")
            with open(path, "rb") as src, open(tmp, "wb") as dst:
                (length,) = struct.unpack("<Q", src.read(8))
                src.seek(8 + length)
                dst.write(_header_block(self._entries, size))
                while chunk := src.read(16 << 20):
                    dst.write(chunk)
            os.replace(tmp, path)
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


def data_start(path: Path) -> int:
    """Where the data section of a tensor file starts."""
    with open(path, "rb") as handle:
        raw = handle.read(8)
    if len(raw) < 8:
        raise UserError(
            f"{path}: tensor file is cut short; the dump was interrupted before its first tensor"
        )
    return 8 + struct.unpack("<Q", raw)[0]


@dataclass
class DumpInfo:
    """What a reader learned about a dump besides its records."""

    path: Path
    header: dict[str, Any]
    records: int = 0
    truncated: bool = False
    truncated_reason: str = ""
    end: dict[str, Any] = field(default_factory=dict)


def manifest_path(dump: Path) -> Path:
    dump = Path(dump)
    if dump.is_file():
        return dump
    return dump / MANIFEST


def read_header(dump: Path) -> dict[str, Any]:
    path = manifest_path(dump)
    if not path.exists():
        raise UserError(
            f"{dump}: not an accelport dump (no {MANIFEST}); make one with `accelport dump`"
        )
    with open(path, "rb") as handle:
        first = handle.readline()
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
    if int(header.get("version", 0)) > VERSION:
        raise UserError(
            f"{path}: dump format {header.get('version')} is newer than this accelport reads ({VERSION}); upgrade accelport"
        )
    return header


def iter_records(dump: Path, info: DumpInfo | None = None) -> Iterator[dict[str, Any]]:
    """Records of a dump in execution order, streamed; fills `info` (truncation, end record) as it goes."""
    path = manifest_path(dump)
    header = read_header(dump)
    if info is not None:
        info.header = header
    with open(path, "rb") as handle:
        handle.readline()
        line_no = 1
        pending: bytes | None = None
        for raw in handle:
            line_no += 1
            if pending is not None:
                # The bad line was not the last one: the file is damaged, not just cut short.
                raise UserError(
                    f"{path}:{line_no - 1}: unreadable record in the middle of the dump; the file is damaged"
                )
            if not raw.endswith(b"\n"):
                pending = raw
                continue
            try:
                record = json.loads(raw)
            except ValueError:
                pending = raw
                continue
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
