"""Every occurrence of a few byte strings in one pass: the compiled `_find.c`, or its pure-Python twin.

`find_all(data, needles)` gives the offsets that repeated `data.find(needle, previous +
len(needle))` would, for every needle, merged in offset order (ties in needle order),
each encoded as `offset << 5 | needle index`. The C helper reads the file once where
the twin reads it once per needle; both give the same list (tests/inventory/test_fastfind.py).
The helper is built at first use by `accelport.native`; without a compiler, or with
ACCELPORT_NATIVE=0, the twin runs.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("_find.c")
_VERSION = 1
MAX_NEEDLES = 32
_CAP = 1 << 16  # occurrences per call; a file with more takes the pure-Python path
_ATTEMPTS = ([["-O2", "-shared", "-fPIC", "-o", "{out}", "{src}"]],)

_state: dict[str, object] = {}


def find_all_python(data: bytes, needles: Sequence[bytes], stop: int = 0) -> list[int]:
    """The reference: one `bytes.find` loop per needle. `stop`: a bit mask of needles that end the search."""
    marks: list[int] = []
    for index, needle in enumerate(needles):
        at = data.find(needle)
        while at >= 0:
            marks.append(at << 5 | index)
            at = data.find(needle, at + len(needle))
    marks.sort()
    if stop:
        for position, mark in enumerate(marks):
            if stop >> (mark & 31) & 1:
                return marks[: position + 1]
    return marks


class _Native:
    """The loaded helper, with one reusable output buffer (the scanner runs one file at a time per process)."""

    def __init__(self) -> None:
        import ctypes

        from accelport import native

        lib, self.path = native.load_library("find", SOURCE, _ATTEMPTS)
        if lib.ap_find_version() != _VERSION:
            raise RuntimeError(f"{self.path}: unexpected helper version")
        self._lib = lib
        fn = lib.ap_find_all
        fn.restype = ctypes.c_int64
        fn.argtypes = (ctypes.c_char_p, ctypes.c_int64, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int32,
                       ctypes.c_uint32, ctypes.c_void_p, ctypes.c_int64)  # fmt: skip
        self._fn = fn
        self._out = (ctypes.c_int64 * _CAP)()
        self._tables: dict[tuple[bytes, ...], tuple[bytes, object]] = {}
        self._int32 = ctypes.c_int32

    def find_all(self, data: bytes, needles: tuple[bytes, ...], stop: int) -> list[int] | None:
        table = self._tables.get(needles)
        if table is None:
            starts = [0]
            for needle in needles:
                starts.append(starts[-1] + len(needle))
            table = self._tables[needles] = (b"".join(needles), (self._int32 * len(starts))(*starts))
        count = self._fn(data, len(data), table[0], table[1], len(needles), stop, self._out, _CAP)
        return None if count < 0 else self._out[:count]


def _native() -> _Native | None:
    if "native" not in _state:
        from accelport import native

        helper = None
        if not native.disabled():
            try:
                helper = _Native()
                _check(helper)
            except Exception as exc:  # any failure means: the pure-Python twin
                log.info("inventory: compiled token search unavailable (%s); using bytes.find", exc)
                helper = None
        _state["native"] = helper
    return _state["native"]  # type: ignore[return-value]


def _check(helper: _Native) -> None:
    """Refuse a helper that gets a small known case wrong (a miscompile)."""
    data = b"xx cuda nccl cudacuda\nimport nccl" * 3
    needles = (b"cud", b"nccl", b"import")
    for stop in (0, 2):
        if helper.find_all(data, needles, stop) != find_all_python(data, needles, stop):
            raise RuntimeError("self-check failed")


def prepare() -> bool:
    """Load (building once per machine) the compiled helper now; True when it is in use."""
    return _native() is not None


def reset() -> None:
    """Forget the loaded helper (tests use it to exercise the fallback)."""
    _state.clear()


def find_all(data: bytes, needles: tuple[bytes, ...], stop: int = 0) -> list[int]:
    """Every occurrence of every needle (each at least 2 bytes, at most 32 needles), as `offset << 5 | index`."""
    helper = _native()
    if helper is not None:
        marks = helper.find_all(data, needles, stop)
        if marks is not None:
            return marks
    return find_all_python(data, needles, stop)
