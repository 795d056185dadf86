"""Stream Chrome/Kineto trace files (torch.profiler on CUDA, ROCm, XPU, CPU; torch_npu's trace_view.json) into columns.

A trace of millions of events never becomes millions of Python dicts held at
once: events are decoded one by one from a text stream and appended to typed
columns (`array.array`), which become numpy arrays for the analysis. Names
and shapes are interned, so a 2.75M-event trace takes ~100 bytes per event.
"""

from __future__ import annotations

import gzip
import io
import json
import logging
import re
from array import array
from collections.abc import Iterator
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

    def value(self) -> Any:
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
            self.pos = end
            return obj

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
            yield from _iter_array(reader)
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
                yield from _iter_array(reader)
            else:
                value = reader.value()
                if metadata is not None:
                    metadata[key] = value
        if not seen_events:
            raise UserError(f"{path}: has no traceEvents; pass a trace written by torch.profiler or torch_npu")


def _iter_array(reader: _Reader) -> Iterator[list[Any]]:
    """Events of the array at the reader, many per decode call.

    The fast path cuts the buffer after the last `},` that is followed by `{` and
    decodes everything before it as one JSON array. A cut that falls inside an
    event (a nested `},{`) fails to decode; then events are read one at a time
    for a while, which is always correct.
    """
    loads = json.loads
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
                    batch = loads("[" + buf[pos : cut + 1] + "]")
                except json.JSONDecodeError:
                    careful = 2000
                else:
                    reader.pos = cut + 1
                    yield batch
                    continue
        careful -= 1
        event = reader.value()
        if isinstance(event, dict):
            yield [event]


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


def _number(value: Any) -> float:
    # torch_npu writes timestamps as strings ("1695115378713.851").
    return value if isinstance(value, float) else float(value)


def load_trace(path: str | Path) -> Trace:
    """Read a trace file into a `Trace` (columns); raises UserError on a file that is not a trace."""
    try:
        import numpy as np
    except ImportError:
        raise MissingDependency("numpy", "torch", "reading profiler traces") from None

    path = Path(path)
    metadata: dict[str, Any] = {}
    strings: list[str] = []
    interned: dict[str, int] = {}
    tracks: list[tuple[str, str]] = []
    track_ids: dict[tuple[Any, Any], int] = {}
    kind, name, track = array("b"), array("i"), array("i")
    ts, dur = array("d"), array("d")
    corr, ext, seq, dims = array("q"), array("q"), array("q"), array("i")
    f_cat, f_id, f_start, f_track, f_ts = array("i"), array("i"), array("b"), array("i"), array("d")
    flow_ids: dict[Any, int] = {}
    process_names: dict[str, str] = {}
    thread_names: dict[tuple[str, str], str] = {}
    counts: dict[str, int] = {}
    category_kind = _CATEGORY_KIND

    def intern(text: str) -> int:
        code = interned.get(text)
        if code is None:
            code = interned[text] = len(strings)
            strings.append(text)
        return code

    def track_of(event: dict[str, Any]) -> int:
        key = (event.get("pid", ""), event.get("tid", ""))
        code = track_ids.get(key)
        if code is None:
            code = track_ids[key] = len(tracks)
            tracks.append((str(key[0]), str(key[1])))
        return code

    try:
        for batch in iter_event_batches(path, metadata):
            for event in batch:
                ph = event.get("ph")
                if ph != "X":
                    counts[ph] = counts.get(ph, 0) + 1
                    if ph == "M":
                        args = event.get("args") or {}
                        if event.get("name") == "process_name":
                            process_names[str(event.get("pid", ""))] = str(args.get("name", ""))
                        elif event.get("name") == "thread_name":
                            thread_names[(str(event.get("pid", "")), str(event.get("tid", "")))] = str(args.get("name", ""))
                    elif ph in ("s", "f", "t") and event.get("cat") in LINK_FLOW_CATEGORIES and "id" in event:
                        key = (event["cat"], event["id"])
                        code = flow_ids.get(key)
                        if code is None:
                            code = flow_ids[key] = len(flow_ids)
                        f_cat.append(intern(event["cat"]))
                        f_id.append(code)
                        f_start.append(1 if ph == "s" else 0)
                        f_track.append(track_of(event))
                        f_ts.append(_number(event.get("ts", 0.0)))
                    continue
                counts["X"] = counts.get("X", 0) + 1
                label = event.get("name", "")
                cat = event.get("cat")
                args = event.get("args")
                if cat is None:
                    code_kind = OTHER
                    if args and "Task Type" in args:
                        code_kind = KERNEL
                    elif label.startswith(_OP_PREFIXES):
                        code_kind = CPU_OP
                else:
                    code_kind = category_kind.get(cat)
                    if code_kind is None:
                        code_kind = category_kind.get(cat.lower(), OTHER)
                if label.startswith("ProfilerStep#"):
                    code_kind = STEP
                elif code_kind == ANNOTATION:
                    if label.startswith(MODULE_PREFIX):
                        code_kind = MODULE
                        label = label[len(MODULE_PREFIX) :]
                elif code_kind == OTHER and cat == "python_function" and label.startswith(TORCH_MODULE_PREFIX):
                    code_kind = MODULE
                    label = label[len(TORCH_MODULE_PREFIX) :]
                kind.append(code_kind)
                name.append(intern(label))
                track.append(track_of(event))
                ts.append(_number(event.get("ts", 0.0)))
                dur.append(_number(event.get("dur", 0.0)))
                if args:
                    c = args.get("correlation", -1)
                    corr.append(c if type(c) is int else -1)
                    x = args.get("External id", -1)
                    ext.append(x if type(x) is int else -1)
                    s = args.get("Sequence number", -1)
                    seq.append(s if type(s) is int else -1)
                    d = args.get("Input Dims") if code_kind == CPU_OP else None
                    dims.append(intern(str(d)) if d else -1)
                    if code_kind == OTHER and c != -1:
                        kind[-1] = LAUNCH  # an unknown runtime category that still carries a correlation id
                else:
                    corr.append(-1)
                    ext.append(-1)
                    seq.append(-1)
                    dims.append(-1)
    except (KeyError, TypeError, ValueError) as exc:
        raise UserError(f"{path}: trace event with an unexpected field ({exc}); is this a Chrome/Kineto trace?") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read ({exc}); is the file complete?") from None

    def column(values: array, dtype: str):
        return np.frombuffer(values, dtype=dtype).copy() if len(values) else np.zeros(0, dtype=dtype)

    trace = Trace(
        path=path,
        metadata=metadata,
        strings=strings,
        kind=column(kind, "i1"),
        name=column(name, "i4"),
        track=column(track, "i4"),
        ts=column(ts, "f8"),
        dur=column(dur, "f8"),
        corr=column(corr, "i8"),
        ext=column(ext, "i8"),
        seq=column(seq, "i8"),
        dims=column(dims, "i4"),
        tracks=tracks,
        process_names=process_names,
        thread_names=thread_names,
        flows={
            "cat": column(f_cat, "i4"),
            "id": column(f_id, "i4"),
            "start": column(f_start, "i1"),
            "track": column(f_track, "i4"),
            "ts": column(f_ts, "f8"),
        },
        counts=counts,
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
