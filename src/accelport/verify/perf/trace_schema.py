"""The fields of a Chrome/Kineto trace event that the trace loader decodes (msgspec Structs).

Decoding straight into these Structs builds one small object per event and
skips every other field (grid, block, stream, queued, ...) without making
Python objects for it; the `Input Dims` lists stay raw JSON text, decoded once
per distinct value. Types are `Any` where traces disagree (torch_npu writes
timestamps as strings, some writers use string thread ids); the loader checks
what it uses.
"""

from typing import Any

import msgspec

NO_DIMS = msgspec.Raw(b"")


class EventArgs(msgspec.Struct, gc=False):
    correlation: Any = -1
    external_id: Any = msgspec.field(default=-1, name="External id")
    sequence: Any = msgspec.field(default=-1, name="Sequence number")
    input_dims: msgspec.Raw = msgspec.field(default=NO_DIMS, name="Input Dims")
    task_type: Any = msgspec.field(default=None, name="Task Type")
    name: Any = None  # metadata events: the process or thread name


NO_ARGS = EventArgs()


class Event(msgspec.Struct, gc=False):
    ph: Any = None
    name: Any = ""
    cat: Any = None
    pid: Any = ""
    tid: Any = ""
    ts: Any = 0.0
    dur: Any = 0.0
    id: Any = None
    args: EventArgs | None = None


events_decoder = msgspec.json.Decoder(list[Event])
event_decoder = msgspec.json.Decoder(Event)
DecodeError = msgspec.DecodeError
