"""Reading the JSON results that `accelport bench|soak|comm --save` write, with one clear error each."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from accelport.errors import UserError
from accelport.fileio import read_input_text


def read_saved(path: str | Path, command: str, kind: str) -> dict[str, Any]:
    """The JSON object saved by `accelport <command> --save`; UserError naming the file otherwise."""
    path = Path(path)
    how = saved_by(command)
    text = read_input_text(path, f"{command} result", hint=how)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: cannot read {command} result ({exc}); {how}") from None
    if not isinstance(data, dict) or data.get("kind") != kind:
        raise UserError(f"{path}: not an accelport {command} result (kind is not {kind!r}); {how}")
    return data


def saved_by(command: str) -> str:
    """The fix for a file that is not a result at all (the flag that saves one is the CLI's to name)."""
    return f"pass a result file saved by `accelport {command}`"


def rerun(command: str) -> str:
    """The fix for a result with a missing or broken field."""
    return f"re-run `accelport {command}` and save its result again to write a complete one"


# Field kinds for `check_fields`: what a saved result must hold before anything reads it.
_KINDS: dict[str, tuple[str, Any]] = {
    "str": ("a string", lambda v: isinstance(v, str)),
    "int": ("an integer", lambda v: isinstance(v, int) and not isinstance(v, bool)),
    "number": ("a number", lambda v: isinstance(v, int | float) and not isinstance(v, bool)),
    "number?": ("a number or null", lambda v: v is None or (isinstance(v, int | float) and not isinstance(v, bool))),
    "list": ("a list", lambda v: isinstance(v, list)),
    "dict": ("an object", lambda v: isinstance(v, dict)),
    "dict?": ("an object or null", lambda v: v is None or isinstance(v, dict)),
    "strs": ("a list of strings", lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v)),
}


def check_fields(data: dict[str, Any], fields: dict[str, str], path: str | Path, command: str, where: str = "",
                 optional: bool = False) -> None:
    """Every `fields` key is in `data` with the right kind; else one UserError naming file and key.

    With `optional`, missing keys are allowed (and null counts as missing); present ones must fit.
    """
    how = rerun(command)
    for key, kind in fields.items():
        name = f"{where}{key}"
        if key not in data or (optional and data[key] is None):
            if optional:
                continue
            raise UserError(f"{path}: {command} result has no {name!r}; {how}")
        label, fits = _KINDS[kind]
        if not fits(data[key]):
            raise UserError(f"{path}: {command} result: {name!r} must be {label} (got {_preview(data[key])}); {how}")


def _preview(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:39] + "…"
