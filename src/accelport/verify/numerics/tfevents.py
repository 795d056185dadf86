"""Read scalar series from TensorBoard event files without TensorFlow or TensorBoard installed.

An event file is a sequence of TFRecords (little-endian u64 length, masked CRC-32C of the
length, the payload, masked CRC-32C of the payload); each payload is an `Event` protocol
buffer: wall_time = 1 (double), step = 2 (int64), summary = 5. `Summary.value` = 1 holds
`Value`s with tag = 1, simple_value = 2 (float, TF1 and torch.utils.tensorboard) or
tensor = 8 (a scalar `TensorProto`, TF2: dtype = 1, tensor_content = 4, float_val = 5,
double_val = 6). Field numbers are those of tensorboard/compat/proto (TensorBoard 2.21).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

from accelport.errors import UserError
from accelport.fileio import read_input

_DT_FLOAT, _DT_DOUBLE, _DT_HALF, _DT_BFLOAT16 = 1, 2, 19, 14


def _crc32c_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _fields(buf: bytes) -> Iterator[tuple[int, int, object]]:
    """(field number, wire type, value) of one protobuf message; bytes for length-delimited fields."""
    pos = 0
    end = len(buf)
    while pos < end:
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 1:
            value = buf[pos : pos + 8]
            pos += 8
        elif wire == 2:
            length, pos = _varint(buf, pos)
            value = buf[pos : pos + length]
            pos += length
        elif wire == 5:
            value = buf[pos : pos + 4]
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        yield number, wire, value


def _tensor_scalar(buf: bytes) -> float | None:
    dtype = None
    content = b""
    floats: list[float] = []
    for number, wire, value in _fields(buf):
        if number == 1 and wire == 0:
            dtype = value
        elif number == 4 and wire == 2:
            content = value  # type: ignore[assignment]
        elif (
            number == 5
        ):  # packed (wire 2) or one fixed32 (wire 5): both are raw little-endian floats
            floats += list(struct.unpack(f"<{len(value) // 4}f", value))  # type: ignore[arg-type]
        elif number == 6:
            floats += list(struct.unpack(f"<{len(value) // 8}d", value))  # type: ignore[arg-type]
    if floats:
        return floats[0]
    if content:
        if dtype == _DT_FLOAT and len(content) >= 4:
            return struct.unpack("<f", content[:4])[0]
        if dtype == _DT_DOUBLE and len(content) >= 8:
            return struct.unpack("<d", content[:8])[0]
        if dtype == _DT_HALF and len(content) >= 2:
            return struct.unpack("<e", content[:2])[0]
        if dtype == _DT_BFLOAT16 and len(content) >= 2:
            return struct.unpack("<f", b"\0\0" + content[:2])[0]
    return None


def scalars(path: Path) -> Iterator[tuple[str, int, float]]:
    """(tag, step, value) of every scalar summary in one event file, in file order.

    A record cut short at the end (a run still writing) ends the file quietly; a record
    whose length or payload fails its CRC, or whose payload does not parse, is an error
    naming the file and the byte where the record starts.
    """
    data = read_input(path, "TensorBoard event file", limit=4 << 30)
    pos = 0
    while pos + 12 <= len(data):
        header = data[pos : pos + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[pos + 8 : pos + 12])
        if masked_crc(header) != length_crc:
            raise UserError(
                f"{path}: corrupt TensorBoard record at byte {pos}; the file is damaged"
            )
        start = pos + 12
        if start + length + 4 > len(data):
            return
        payload = data[start : start + length]
        (payload_crc,) = struct.unpack("<I", data[start + length : start + length + 4])
        if masked_crc(payload) != payload_crc:
            raise UserError(
                f"{path}: TensorBoard record at byte {pos} fails its CRC check (its data is damaged); "
                "the file is corrupt: restore it or leave it out"
            )
        try:
            yield from _record_scalars(payload)
        except (IndexError, ValueError, struct.error):
            raise UserError(
                f"{path}: TensorBoard record at byte {pos} does not parse as an Event; the file is damaged"
            ) from None
        pos = start + length + 4


def _record_scalars(payload: bytes) -> Iterator[tuple[str, int, float]]:
    """(tag, step, value) of the scalar summaries in one Event payload."""
    step = 0
    summary = None
    for number, _wire, value in _fields(payload):
        if number == 2:
            step = int(value)  # type: ignore[arg-type]
            if step >= 1 << 63:
                step -= 1 << 64
        elif number == 5:
            summary = value
    if summary is None:
        return
    for number, _wire, value in _fields(summary):  # type: ignore[arg-type]
        if number != 1:
            continue
        tag = None
        scalar = None
        for field, wire, item in _fields(value):  # type: ignore[arg-type]
            if field == 1:
                tag = bytes(item).decode("utf-8", "replace")  # type: ignore[arg-type]
            elif field == 2 and wire == 5:
                scalar = struct.unpack("<f", item)[0]  # type: ignore[arg-type]
            elif field == 8 and wire == 2:
                scalar = _tensor_scalar(item)  # type: ignore[arg-type]
        if tag is not None and scalar is not None:
            yield tag, step, float(scalar)


def event_files(path: Path) -> list[Path]:
    path = Path(path)
    if path.is_dir():
        return sorted(p for p in path.rglob("*") if p.is_file() and "tfevents" in p.name)
    return [path]
