"""`[tool.accelport]` in a project's pyproject.toml: defaults for the options of the commands that report findings.

    [tool.accelport]
    exclude = ["third_party/**"]     # read by the file walk (source.walk)
    select = ["AP1", "AP6101"]       # or "AP1,AP6101"
    ignore = ["AP8"]
    fail-on = "medium"
    target = "npu"

The command line wins over the file. The file is the one in the first PATH given (a
folder) or in the nearest folder above it (a file), up to the file system root.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from accelport.errors import UserError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

# key -> (kind, what the CLI option is called)
KEYS: dict[str, tuple[str, str]] = {
    "exclude": ("globs", "--exclude"),
    "select": ("ids", "--select"),
    "ignore": ("ids", "--ignore"),
    "fail-on": ("text", "--fail-on"),
    "target": ("text", "--target"),
}


def find_pyproject(paths: Sequence[str]) -> Path | None:
    """The pyproject.toml that governs `paths` (see the module docstring), or None."""
    if not paths:
        return None
    start = Path(paths[0]).resolve()
    folder = start if start.is_dir() else start.parent
    for candidate in (folder, *folder.parents):
        if (candidate / "pyproject.toml").is_file():
            return candidate / "pyproject.toml"
    return None


def project_settings(paths: Sequence[str]) -> dict[str, Any]:
    """The [tool.accelport] table that governs `paths`, checked; {} when there is none."""
    path = find_pyproject(paths)
    if path is None:
        return {}
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UserError(f"{path}: cannot be read as TOML ({exc}); fix it or run from another folder") from None
    table = data.get("tool", {}).get("accelport", {})
    if not isinstance(table, dict):
        raise UserError(f"{path}: [tool.accelport] must be a table")
    settings: dict[str, Any] = {}
    for key, value in table.items():
        if key not in KEYS:
            raise UserError(f"{path}: [tool.accelport] has unknown key {key!r}; known keys: {', '.join(KEYS)}")
        kind, _ = KEYS[key]
        if kind == "text":
            if not isinstance(value, str):
                raise UserError(f"{path}: [tool.accelport] {key} must be a string")
        elif kind == "ids":
            if isinstance(value, str):
                value = [value]
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise UserError(f"{path}: [tool.accelport] {key} must be a list of rule IDs or prefixes")
            value = ",".join(value)
        elif not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise UserError(f"{path}: [tool.accelport] {key} must be a list of glob strings")
        settings[key] = value
    settings["__file__"] = str(path)
    return settings


def apply(args: Any, settings: dict[str, Any], keys: Sequence[str]) -> None:
    """Fill the options in `keys` that the command line left unset from `settings`."""
    for key in keys:
        dest = key.replace("-", "_")
        if key in settings and getattr(args, dest, None) in (None, ""):
            setattr(args, dest, settings[key])
