"""The names the compiled recorder (_recorder.c) reads and calls on a Capture and its _Entry records, by index.

The C code holds none of these names: `recorder.load()` passes this table to the extension's
`setup()`, which interns each name at the index its enum in _recorder_fields.h gives it (the
enum member is the name in capitals, without the leading underscore, after A_, M_ or E_).
Renaming an attribute is renaming it here as well; adding or removing one is changing the
tuple and the enum together and raising FIELDS_VERSION on both sides. `setup()` refuses a
table of another version or length, and the capture then records in Python, as it does
wherever the extension cannot be built. tests/verify/test_recorder.py checks every name
against a started capture, and the enums against these tuples.
"""

from __future__ import annotations

FIELDS_VERSION = 1

# Attributes of a Capture (dump.py, dump_hooks.py, dump_writer.py) the recorder reads or sets.
CAPTURE_ATTRIBUTES = (
    "_busy", "_live", "_in_optimizer", "_forward_stack", "phases", "_op_info", "_filtered", "views",
    "_cache", "_cache_limit", "_node_modules", "_seq", "current_step", "_calls", "_call_sites",
    "_records", "_waiting_tensors", "flush_every", "_opened", "_frame_cache", "_lines", "_lines_cwd",
)  # fmt: skip

# Methods of a Capture the recorder hands the cases off its common path to.
CAPTURE_METHODS = (
    "_api_call", "_open", "_entry", "_backward_module", "_wanted", "_pass_view", "_flush", "_prune",
    "_library_code", "_line_text", "_desc_of", "_compute", "_output_descs",
)  # fmt: skip

# Slots of a recorded tensor (dump_ops._Entry) the recorder fills in and reads.
ENTRY_ATTRIBUTES = ("dtype", "shape", "stats", "src", "data", "desc", "uninitialised")

FieldTable = tuple[int, tuple[str, ...], tuple[str, ...], tuple[str, ...]]


def table() -> FieldTable:
    """What `setup()` takes as config["fields"]: (version, attributes, methods, entry slots)."""
    return FIELDS_VERSION, CAPTURE_ATTRIBUTES, CAPTURE_METHODS, ENTRY_ATTRIBUTES
