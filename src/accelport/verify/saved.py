"""Reading the JSON results that `accelport bench|soak|comm --save` write, with one clear error each."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from accelport.errors import UserError


def read_saved(path: str | Path, command: str, kind: str) -> dict[str, Any]:
    """The JSON object saved by `accelport <command> --save`; UserError naming the file otherwise."""
    path = Path(path)
    how = f"pass a file saved by `accelport {command} --save FILE`"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path}: {command} result not found; {how}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"{path}: cannot read {command} result ({exc}); {how}") from None
    if not isinstance(data, dict) or data.get("kind") != kind:
        raise UserError(f"{path}: not an accelport {command} result (kind is not {kind!r}); {how}")
    return data
