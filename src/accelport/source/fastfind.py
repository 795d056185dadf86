"""The Python scanner's byte-level passes in C (`_find.c`), each with a pure-Python twin.

`find_all(data, needles)` gives the offsets that repeated `data.find(needle, previous +
len(needle))` would, for every needle, merged in offset order (ties in needle order),
each encoded as `offset << 5 | needle index`. The C helper reads the file once where
the twin reads it once per needle. The helper also carries C versions of three loops of
the Python scanner (`chunks.string_edges`, `chunks.statement_starts` and
`python.code_token_lines`), reached through `native()`; the Python functions stay as
the reference and the fallback, and tests/inventory/test_fastfind.py holds every pair
equal on random input. The helper is built at first use by `accelport.native`; without
a compiler, or with ACCELPORT_NATIVE=0, the twins run.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("_find.c")
_VERSION = 2
OVERFLOW = object()  # a C pass ran out of output room: the caller runs the Python twin
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
        self._edges = (ctypes.c_int64 * _CAP)()
        self._lines = (ctypes.c_int64 * _CAP)()
        self._tables: dict[tuple[bytes, ...], tuple[bytes, object]] = {}
        self._int32 = ctypes.c_int32
        i64, i32, ptr, text = ctypes.c_int64, ctypes.c_int32, ctypes.c_void_p, ctypes.c_char_p
        self._string_edges = lib.ap_string_edges
        self._string_edges.restype = i64
        self._string_edges.argtypes = (text, i64, ptr, i64)
        self._statement_starts = lib.ap_statement_starts
        self._statement_starts.restype = i64
        self._statement_starts.argtypes = (text, i64, ptr, i64, ptr, i64)
        self._token_lines = lib.ap_token_lines
        self._token_lines.restype = i64
        self._token_lines.argtypes = (text, i64, ptr, i64, i32, text, ptr, i32, text, ptr, i32, text, ptr, i32,
                                      ptr, i64, ptr, i64)  # fmt: skip

    def _table(self, words: tuple[bytes, ...]) -> tuple[bytes, object]:
        table = self._tables.get(words)
        if table is None:
            starts = [0]
            for word in words:
                starts.append(starts[-1] + len(word))
            table = self._tables[words] = (b"".join(words), (self._int32 * len(starts))(*starts))
        return table

    def string_edges(self, data: bytes):
        """chunks.string_edges: a list, None when unsure, or OVERFLOW."""
        count = self._string_edges(data, len(data), self._edges, _CAP)
        if count == -2:
            return None
        return OVERFLOW if count < 0 else self._edges[:count]

    def statement_starts(self, data: bytes, edges: list[int]):
        """The loop of chunks.statement_starts (its None cases stay in Python): a list, or OVERFLOW."""
        count = self._statement_starts(data, len(data), ctypes_array(edges, self._edges), len(edges), self._out, _CAP)
        return OVERFLOW if count < 0 else self._out[:count]

    def token_lines(self, data: bytes, needles: tuple[bytes, ...], import_index: int, keep: tuple[bytes, ...],
                    packages: tuple[bytes, ...], env: tuple[bytes, ...], edges: list[int] | None):  # fmt: skip
        """The loop of python.code_token_lines over this file's marks: a list of lines, or OVERFLOW."""
        blob, starts = self._table(needles)
        marks = self._fn(data, len(data), blob, starts, len(needles), 0, self._out, _CAP)
        if marks < 0:
            return OVERFLOW
        keep_table, package_table, env_table = self._table(keep), self._table(packages), self._table(env)
        pointer = ctypes_array(edges, self._edges) if edges else None
        count = self._token_lines(data, len(data), self._out, marks, import_index,
                                  keep_table[0], keep_table[1], len(keep),
                                  package_table[0], package_table[1], len(packages),
                                  env_table[0], env_table[1], len(env),
                                  pointer, len(edges) if edges else -1, self._lines, _CAP)  # fmt: skip
        return OVERFLOW if count < 0 else self._lines[:count]

    def find_all(self, data: bytes, needles: tuple[bytes, ...], stop: int) -> list[int] | None:
        blob, starts = self._table(needles)
        count = self._fn(data, len(data), blob, starts, len(needles), stop, self._out, _CAP)
        return None if count < 0 else self._out[:count]


def ctypes_array(values: list[int], buffer):
    """`values` in `buffer` (an int64 array of _CAP) when they fit, else in a new array."""
    if len(values) <= len(buffer):
        buffer[: len(values)] = values
        return buffer
    import ctypes

    return (ctypes.c_int64 * len(values))(*values)


def native() -> _Native | None:
    """The compiled helper, or None (no compiler, a failed self-check, ACCELPORT_NATIVE=0)."""
    return _native()


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
            raise RuntimeError("self-check failed (find_all)")
    sample = b'"""doc torch.cuda"""\nimport torch  # cuda\n@deco\ndef f():\n    return x.cuda()\n'
    edges = helper.string_edges(sample)
    if edges != [0, 20] or helper.statement_starts(sample, edges) != [1, 2]:
        raise RuntimeError("self-check failed (string edges, statement starts)")
    lines = helper.token_lines(sample, needles, 2, (b"cuda",), (b"apex",), (b"CUDA",), edges)
    if lines != [2, 5]:  # an import line counts by its words, even one in its comment (the AST settles it)
        raise RuntimeError(f"self-check failed (token lines: {lines})")


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
