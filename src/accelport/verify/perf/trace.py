"""Stream Chrome/Kineto trace files (torch.profiler on CUDA, ROCm, XPU, CPU; torch_npu's trace_view.json) into columns.

A trace of millions of events never becomes millions of Python dicts held at
once: the text is read in 4 MB buffers, each decoded in one call into small
typed records (`trace_schema.Event`: only the fields the analysis uses) and
appended to typed columns by one list comprehension per column. Names
and shapes are interned, so a 2.75M-event trace takes ~60 bytes per event.
"""

from __future__ import annotations

import gc
import gzip
import importlib.util
import io
import json
import logging
import re
from array import array
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accelport.errors import MissingDependency, UserError

log = logging.getLogger(__name__)

# Event kinds (the `kind` column).
OTHER = 0
CPU_OP = 1  # an ATen/autograd/c10d operator on a host thread
ANNOTATION = 2  # record_function ranges (Optimizer.step#..., user ranges)
MODULE = 3  # a module scope: accelport's module annotations, or with_modules' "nn.Module: X"
STEP = 4  # ProfilerStep#N
LAUNCH = 5  # runtime call that launches device work (cudaLaunchKernel, hipLaunchKernel, ...)
KERNEL = 6  # device kernel (or an Ascend task)
MEMCPY = 7
MEMSET = 8
FLOW_START = 9  # pseudo-event used while linking flows; never stored
HOST_KINDS = (CPU_OP, ANNOTATION, MODULE, STEP, LAUNCH)
DEVICE_KINDS = (KERNEL, MEMCPY, MEMSET)

# accelport's own module annotations (written by `accelport profile`).
MODULE_PREFIX = "accelport.module: "
TORCH_MODULE_PREFIX = "nn.Module: "

_CATEGORY_KIND = {
    "cpu_op": CPU_OP,
    "operator": CPU_OP,
    "user_annotation": ANNOTATION,
    "python_function": OTHER,
    "cuda_runtime": LAUNCH,
    "cuda_driver": LAUNCH,
    "runtime": LAUNCH,
    "xpu_runtime": LAUNCH,
    "privateuse1_runtime": LAUNCH,
    "mtia_runtime": LAUNCH,
    "kernel": KERNEL,
    "gpu_memcpy": MEMCPY,
    "memcpy": MEMCPY,
    "gpu_memset": MEMSET,
    "memset": MEMSET,
}
# Flow categories that tie a host event to the device work it started.
LINK_FLOW_CATEGORIES = ("ac2g", "async_npu")
# Host op names seen without a category (torch_npu writes some events that way).
_OP_PREFIXES = ("aten::", "npu::", "c10d::", "autograd::", "_c10d_functional::", "torch_npu::")

_CHUNK = 1 << 22
_MAX_VALUE = 1 << 28  # one JSON value (an event, the metadata) larger than this is an error
_SKIP = re.compile(r"[\s,]*")


@dataclass
class Trace:
    """One trace as columns; row i of every column is event i (complete 'X' events only)."""

    path: Path
    metadata: dict[str, Any]
    strings: list[str]  # interned names and shape strings
    kind: Any  # numpy arrays from here on
    name: Any
    track: Any
    ts: Any  # microseconds
    dur: Any
    corr: Any  # correlation id linking launch <-> device work, -1 when absent
    ext: Any  # External id, -1 when absent
    seq: Any  # autograd sequence number, -1 when absent
    dims: Any  # interned "Input Dims" string, -1 when absent
    tracks: list[tuple[str, str]]  # (pid, tid) as text, indexed by `track`
    process_names: dict[str, str]
    thread_names: dict[tuple[str, str], str]
    flows: dict[str, Any] = field(default_factory=dict)  # columns: cat, id, start, track, ts
    counts: dict[str, int] = field(default_factory=dict)  # events by phase, for the record

    def __len__(self) -> int:
        return len(self.kind)

    @property
    def event_count(self) -> int:
        """Every event read from the file, of every phase."""
        return sum(self.counts.values())

    def string(self, index: int) -> str:
        return self.strings[index] if index >= 0 else ""

    def device_name(self) -> str:
        """What ran the device side, from deviceProperties or process names ('' for a host-only trace)."""
        props = self.metadata.get("deviceProperties") or []
        if props and isinstance(props, list) and isinstance(props[0], dict) and props[0].get("name"):
            return str(props[0]["name"])
        for name in self.process_names.values():
            if name.lower().startswith(("ascend hardware", "npu")):
                return name
        return ""


class _Reader:
    """A text stream with a sliding buffer, decoding one JSON value at a time."""

    def __init__(self, stream: io.TextIOBase, path: Path) -> None:
        self.stream = stream
        self.path = path
        self.buf = ""
        self.pos = 0
        self.eof = False
        self.decode = json.JSONDecoder().raw_decode

    def fill(self) -> bool:
        chunk = self.stream.read(_CHUNK)
        if not chunk:
            self.eof = True
            return False
        self.buf = self.buf[self.pos :] + chunk
        self.pos = 0
        return True

    def skip(self) -> str:
        """Skip whitespace and commas; return the next character ('' at the end)."""
        while True:
            self.pos = _SKIP.match(self.buf, self.pos).end()
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self.fill():
                return ""

    def value(self, text: bool = False) -> Any:
        """The next JSON value (or, with `text`, its source text)."""
        self.skip()
        while True:
            try:
                obj, end = self.decode(self.buf, self.pos)
            except json.JSONDecodeError as exc:
                # A value cut by the buffer edge fails too: read on, but a real syntax error
                # must not make us pull the whole file into one string.
                if self.eof or len(self.buf) - self.pos > _MAX_VALUE or not self.fill():
                    raise UserError(
                        f"{self.path}: not a valid Chrome/Kineto trace (JSON error near character "
                        f"{exc.pos}: {exc.msg}); re-export the trace or check the file is complete"
                    ) from None
                continue
            # A number or literal cut by the buffer edge decodes "successfully" but short.
            if end >= len(self.buf) and not self.eof and self.fill():
                continue
            start, self.pos = self.pos, end
            return self.buf[start:end] if text else obj

    def expect(self, char: str) -> None:
        if self.skip() != char:
            found = self.buf[self.pos : self.pos + 20] or "end of file"
            raise UserError(f"{self.path}: not a Chrome/Kineto trace (expected {char!r}, found {found!r}); pass a .json or .json.gz trace")
        self.pos += 1


def _open_text(path: Path) -> io.TextIOBase:
    with path.open("rb") as probe:
        magic = probe.read(2)
    if magic == b"\x1f\x8b":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", errors="replace")
    return path.open("r", encoding="utf-8", errors="replace")


def iter_events(path: str | Path, metadata: dict[str, Any] | None = None) -> Iterator[dict[str, Any]]:
    """Yield the trace events of a Chrome trace file (object or array form, plain or gzip).

    Top-level keys other than `traceEvents` are stored into `metadata` when given.
    """
    for batch in iter_event_batches(path, metadata):
        yield from batch


def iter_event_batches(path: str | Path, metadata: dict[str, Any] | None = None) -> Iterator[list[Any]]:
    """Like `iter_events`, in lists of events (one per buffer), which is much faster to consume."""
    return _iter_batches(path, metadata, _JSON_EVENTS)


@dataclass(frozen=True)
class _Decoding:
    """How a batch of events (a JSON array text) and one event (a JSON object text) become values."""

    many: Callable[[str], list[Any]]
    one: Callable[[str], Any]
    errors: tuple[type[Exception], ...]


_JSON_EVENTS = _Decoding(json.loads, json.loads, (json.JSONDecodeError,))


def _iter_batches(path: str | Path, metadata: dict[str, Any] | None, decoding: _Decoding) -> Iterator[list[Any]]:
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: trace file not found; pass the .json (or .json.gz) file torch.profiler wrote")
    try:
        stream = _open_text(path)
    except OSError as exc:
        raise UserError(f"{path}: cannot read ({exc.strerror})") from None
    with stream:
        reader = _Reader(stream, path)
        try:
            first = reader.skip()
        except (OSError, EOFError) as exc:
            raise UserError(f"{path}: cannot read ({exc}); is the gzip file complete?") from None
        if first == "[":
            reader.pos += 1
            yield from _iter_array(reader, decoding)
            return
        if first != "{":
            raise UserError(f"{path}: not a Chrome/Kineto trace (it does not start with '{{' or '['); pass a trace .json file")
        reader.pos += 1
        seen_events = False
        while True:
            char = reader.skip()
            if char == "}":
                break
            if char != '"':
                raise UserError(f"{path}: not a valid Chrome/Kineto trace (truncated or malformed top level); re-export the trace")
            key = reader.value()
            reader.expect(":")
            if key == "traceEvents":
                reader.expect("[")
                seen_events = True
                yield from _iter_array(reader, decoding)
            else:
                value = reader.value()
                if metadata is not None:
                    metadata[key] = value
        if not seen_events:
            raise UserError(f"{path}: has no traceEvents; pass a trace written by torch.profiler or torch_npu")


def _iter_array(reader: _Reader, decoding: _Decoding) -> Iterator[list[Any]]:
    """Events of the array at the reader, many per decode call.

    The fast path cuts the buffer after the last `},` that is followed by `{` and
    decodes everything before it as one JSON array. A cut that falls inside an
    event (a nested `},{`) fails to decode; then events are read one at a time
    for a while, which is always correct.
    """
    careful = 0
    while True:
        char = reader.skip()
        if char == "]":
            reader.pos += 1
            return
        if char == "":
            raise UserError(f"{reader.path}: trace ends in the middle of traceEvents (truncated file); re-export it")
        buf, pos = reader.buf, reader.pos
        if careful <= 0 and char == "{":
            cut = _last_event_end(buf, pos)
            if cut > pos:
                try:
                    batch = decoding.many("[" + buf[pos : cut + 1] + "]")
                except decoding.errors:
                    careful = 2000
                else:
                    reader.pos = cut + 1
                    yield batch
                    continue
            elif len(buf) - pos < _MAX_VALUE and reader.fill():
                # The rest of the buffer is one event cut by its edge: read on, rather than fail
                # a decode (a failed decode leaves a cycle that holds the whole buffer).
                continue
        careful -= 1
        text = reader.value(text=True)
        if text.startswith("{"):
            try:
                yield [decoding.one(text)]
            except decoding.errors as exc:
                raise UserError(f"{reader.path}: trace event with an unexpected field ({exc}); is this a Chrome/Kineto trace?") from None


def _last_event_end(buf: str, pos: int) -> int:
    """Index of the last `}` in buf[pos:] that is followed by `,` and then `{` (-1 when none)."""
    end = len(buf)
    for _ in range(64):
        cut = buf.rfind("},", pos, end)
        if cut < 0:
            return -1
        rest = _SKIP.match(buf, cut + 1).end()
        if rest < len(buf) and buf[rest] == "{":
            return cut
        end = cut
    return -1


class _Columns:
    """Events, a batch at a time, into typed columns; names, shapes and tracks interned.

    Each batch is a list of `trace_schema.Event`; every column is filled by one
    list comprehension and one numpy conversion per batch, never by per-event
    Python branching (the classification of an event depends on its (category,
    name) pair, which is worked out once per distinct pair).
    """

    def __init__(self) -> None:
        self.strings: list[str] = []
        self.interned: dict[str, int] = {}
        self.tracks: list[tuple[str, str]] = []
        self.track_ids: dict[tuple[Any, Any], int] = {}
        self.classes: dict[tuple[Any, Any], int] = {}  # (cat, name) -> label | kind << 32 | no-category << 40
        self.dims_ids: dict[bytes, int] = {b"": -1}
        self.flow_ids: dict[Any, int] = {}  # flow ids that are not small ints
        self.process_names: dict[str, str] = {}
        self.thread_names: dict[tuple[str, str], str] = {}
        self.counts: Counter[Any] = Counter()
        # array.array grows in place (realloc): numpy chunks kept in a list would pepper the heap
        # between the short-lived batch buffers and keep it from being reused.
        self.columns = {name: array(_TYPECODES[dtype]) for name, dtype in _COLUMN_TYPES.items()}

    def intern(self, text: str) -> int:
        code = self.interned.get(text)
        if code is None:
            code = self.interned[text] = len(self.strings)
            self.strings.append(text)
        return code

    def track_codes(self, events: list[Any]) -> list[int]:
        ids = self.track_ids
        get = ids.get
        codes = [get((e.pid, e.tid)) for e in events]
        if None not in codes:
            return codes
        for e in events:
            key = (e.pid, e.tid)
            if key not in ids:
                ids[key] = len(self.tracks)
                self.tracks.append((str(key[0]), str(key[1])))
        return [ids[(e.pid, e.tid)] for e in events]

    def classify(self, cat: Any, name: Any) -> int:
        if not isinstance(name, str) or not (cat is None or isinstance(cat, str)):
            raise TypeError(f"name {name!r} / cat {cat!r} is not text")
        label = name
        if cat is None:
            kind = CPU_OP if name.startswith(_OP_PREFIXES) else OTHER
        else:
            kind = _CATEGORY_KIND.get(cat)
            if kind is None:
                kind = _CATEGORY_KIND.get(cat.lower(), OTHER)
        if name.startswith("ProfilerStep#"):
            kind = STEP
        elif kind == ANNOTATION and name.startswith(MODULE_PREFIX):
            kind, label = MODULE, name[len(MODULE_PREFIX) :]
        elif kind == OTHER and cat == "python_function" and name.startswith(TORCH_MODULE_PREFIX):
            kind, label = MODULE, name[len(TORCH_MODULE_PREFIX) :]
        return self.intern(label) | kind << 32 | (cat is None) << 40

    def dims_code(self, raw: bytes) -> int:
        code = self.dims_ids.get(raw)
        if code is None:
            if not raw:  # no "Input Dims"
                return -1
            # The text the old per-event reader produced: str() of the decoded list.
            code = self.dims_ids[raw] = self.intern(str(json.loads(raw)))
        return code

    def add(self, batch: list[Any]) -> None:
        import numpy as np

        from accelport.verify.perf.trace_schema import NO_ARGS

        phases = [e.ph for e in batch]
        self.counts.update(phases)
        if phases.count("X") == len(phases):
            events = batch
        else:
            events = [e for e in batch if e.ph == "X"]
            self._add_other([e for e in batch if e.ph != "X"])
        if not events:
            return
        classes = self.classes
        get = classes.get
        info = [get((e.cat, e.name)) for e in events]
        if None in info:  # pairs not seen before: classify each once
            for e in events:
                key = (e.cat, e.name)
                if key not in classes:
                    classes[key] = self.classify(*key)
            info = [classes[(e.cat, e.name)] for e in events]
        info = np.array(info, dtype=np.int64)
        args = [e.args or NO_ARGS for e in events]
        kind = ((info >> 32) & 0xFF).astype(np.int8)
        corr = _ints([a.correlation for a in args])
        no_category = (info >> 40).astype(bool)
        task = np.array([a.task_type is not None for a in args], dtype=bool)
        kind[no_category & task & (kind != STEP)] = KERNEL  # torch_npu device tasks carry a "Task Type"
        kind[(kind == OTHER) & (corr != -1)] = LAUNCH  # an unknown runtime category with a correlation id
        dims_get = self.dims_ids.get
        raw_dims = [bytes(a.input_dims) for a in args]
        dims = [dims_get(d) for d in raw_dims]
        if None in dims:
            dims = [self.dims_code(d) for d in raw_dims]
        dims = np.array(dims, dtype=np.int32)
        dims[kind != CPU_OP] = -1
        self.put("kind", kind)
        self.put("name", (info & 0xFFFFFFFF).astype(np.int32))
        self.put("track", np.array(self.track_codes(events), dtype=np.int32))
        self.put("ts", np.array([e.ts for e in events], dtype=np.float64))
        self.put("dur", np.array([e.dur for e in events], dtype=np.float64))
        self.put("corr", corr)
        self.put("ext", _ints([a.external_id for a in args]))
        self.put("seq", _ints([a.sequence for a in args]))
        self.put("dims", dims)

    def _add_other(self, events: list[Any]) -> None:
        import numpy as np

        for e in [e for e in events if e.ph == "M"]:
            if e.args is not None and e.name == "process_name":
                self.process_names[str(e.pid)] = str(e.args.name or "")
            elif e.args is not None and e.name == "thread_name":
                self.thread_names[(str(e.pid), str(e.tid))] = str(e.args.name or "")
        flows = [e for e in events if e.ph in _FLOW_PHASES and e.cat in _LINK_FLOWS and e.id is not None]
        if not flows:
            return
        # Flow ids are kept as they are (ints, in nearly every trace); only other ids are interned.
        ids = [e.id for e in flows]
        if not all(type(v) is int and 0 <= v < _OTHER_IDS for v in ids):
            other = self.flow_ids
            ids = [v if type(v) is int and 0 <= v < _OTHER_IDS else _OTHER_IDS + other.setdefault(v, len(other)) for v in ids]
        category = {cat: self.intern(cat) for cat in LINK_FLOW_CATEGORIES}
        self.put("f_cat", np.array([category[e.cat] for e in flows], dtype=np.int32))
        self.put("f_id", np.array(ids, dtype=np.int64))
        self.put("f_start", np.array([e.ph == "s" for e in flows], dtype=np.int8))
        self.put("f_track", np.array(self.track_codes(flows), dtype=np.int32))
        self.put("f_ts", np.array([e.ts for e in flows], dtype=np.float64))

    def put(self, name: str, values: Any) -> None:
        """Append a numpy chunk (of the column's dtype) to a column."""
        self.columns[name].frombytes(memoryview(values).cast("B"))

    def column(self, name: str) -> Any:
        import numpy as np

        return np.frombuffer(self.columns.pop(name), dtype=_COLUMN_TYPES[name])


_FLOW_PHASES = frozenset(("s", "f", "t"))
_LINK_FLOWS = frozenset(LINK_FLOW_CATEGORIES)
_EVENT_COLUMNS = ("kind", "name", "track", "ts", "dur", "corr", "ext", "seq", "dims")
_FLOW_COLUMNS = ("f_cat", "f_id", "f_start", "f_track", "f_ts")
_COLUMN_TYPES = {"kind": "i1", "name": "i4", "track": "i4", "ts": "f8", "dur": "f8", "corr": "i8", "ext": "i8",
                 "seq": "i8", "dims": "i4", "f_cat": "i4", "f_id": "i8", "f_start": "i1", "f_track": "i4", "f_ts": "f8"}


_OTHER_IDS = 1 << 62  # flow ids that are not ints in [0, 2**62) are numbered from here
_TYPECODES = {"i1": "b", "i4": "i", "i8": "q", "f8": "d"}


def _ints(values: list[Any]) -> Any:
    """An int64 column; anything that is not an int (absent, text, float) becomes -1."""
    import numpy as np

    return np.array([v if type(v) is int else -1 for v in values], dtype=np.int64)


def check_dependencies() -> None:
    """Raise MissingDependency unless numpy and msgspec (the `profile` extra) are installed."""
    for package in ("numpy", "msgspec"):
        if importlib.util.find_spec(package) is None:
            raise MissingDependency(package, "profile", "reading profiler traces")


def load_trace(path: str | Path) -> Trace:
    """Read a trace file into a `Trace` (columns); raises UserError on a file that is not a trace."""
    check_dependencies()
    from accelport.verify.perf import trace_schema

    path = Path(path)
    metadata: dict[str, Any] = {}
    columns = _Columns()
    decoding = _Decoding(trace_schema.events_decoder.decode, trace_schema.event_decoder.decode,
                         (json.JSONDecodeError, trace_schema.DecodeError))
    collecting = gc.isenabled()
    gc.disable()  # millions of short-lived records: the cyclic collector would rescan them all, for nothing
    try:
        for batch in _iter_batches(path, metadata, decoding):
            columns.add(batch)
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise UserError(f"{path}: trace event with an unexpected field ({exc}); is this a Chrome/Kineto trace?") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read ({exc}); is the file complete?") from None
    finally:
        if collecting:
            gc.enable()

    trace = Trace(
        path=path,
        metadata=metadata,
        strings=columns.strings,
        **{name: columns.column(name) for name in _EVENT_COLUMNS},
        tracks=columns.tracks,
        process_names=columns.process_names,
        thread_names=columns.thread_names,
        flows={name[2:]: columns.column(name) for name in _FLOW_COLUMNS},
        counts=dict(columns.counts),
    )
    _classify_device_tracks(trace)
    if not len(trace):
        raise UserError(f"{path}: the trace has no complete ('X') events; profile at least one step")
    return trace


def _classify_device_tracks(trace: Trace) -> None:
    """Events on a device process (e.g. torch_npu's "Ascend Hardware") without a category are device work."""
    device_pids = {pid for pid, label in trace.process_names.items() if label.lower().startswith("ascend hardware")}
    if not device_pids:
        return
    import numpy as np

    device_tracks = np.array([i for i, (pid, _) in enumerate(trace.tracks) if pid in device_pids], dtype="i4")
    mask = np.isin(trace.track, device_tracks) & (trace.kind == OTHER)
    trace.kind[mask] = KERNEL
