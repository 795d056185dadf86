"""The helper module migrate writes into the user's tree, so that migrated code needs only torch.

Where PyTorch has no device-agnostic API (an event that times on the CPU, a current stream
without an accelerator, the vendor's visible-devices variable, bfloat16 support), migrated code
calls a small module written beside it (default `_accelport_compat.py`) instead of importing
accelport. It is generated from accelport's own `accelport.compat` (the same functions, copied
from its source) and the vendor profiles, starts with a header saying so, and is the same bytes
on every run. `--helpers package` keeps `import accelport.compat` instead.

Where it goes: next to a script (a folder without `__init__.py`), imported as `import NAME`; in
a package, in its top package folder inside the tree being migrated, imported relatively
(`from .. import NAME`), which works however the package is put on `sys.path`.
"""

from __future__ import annotations

import ast
import functools
import inspect
import os
from collections.abc import Sequence
from dataclasses import dataclass

from accelport import __version__, knowledge
from accelport.source.markers import GENERATED_HEADER

DEFAULT_MODULE = "_accelport_compat"
PACKAGE_MODULE = "accelport.compat"
# What migrated code uses from accelport.compat, with what those need; copied from its source.
_COPIED = ("device", "_device_type", "is_bf16_supported", "CpuEvent", "Event", "CpuStream", "current_stream")
_IMPORTS = ("from __future__ import annotations", "", "import time", "from typing import Any")


@dataclass(frozen=True)
class HelperImport:
    """How one migrated file reaches the helpers: the import statement, the name it binds, where the module is."""

    statement: str
    name: str
    section: str  # isort section of the statement: "thirdparty", "firstparty" or "local"
    path: str | None = None  # the helper file to write (None: the accelport package)
    first_party: frozenset[str] = frozenset()  # top-level names the file's folder makes first-party (isort)


def package_import() -> HelperImport:
    return HelperImport(f"import {PACKAGE_MODULE}", PACKAGE_MODULE, "thirdparty")


def module_import(module: str = DEFAULT_MODULE) -> HelperImport:
    """The import of a helper module beside the file (when the file's location is not known)."""
    return HelperImport(f"import {module}", module, "firstparty", None, frozenset({module}))


def helper_import_for(path: str, module: str, roots: Sequence[str] = ()) -> HelperImport:
    """Where the helper module for the file at `path` lives and how the file imports it."""
    return _helper_import_in(os.path.dirname(os.path.abspath(path)), module, tuple(roots))


@functools.lru_cache(maxsize=1024)
def _helper_import_in(folder: str, module: str, roots: tuple[str, ...]) -> HelperImport:
    """helper_import_for, once per folder (every file of a folder reaches the helpers alike)."""
    limits = [os.path.abspath(r) if os.path.isdir(r) else os.path.dirname(os.path.abspath(r)) for r in roots]
    top, depth = folder, 0
    while _is_package(top):
        parent = os.path.dirname(top)
        if parent == top or not _is_package(parent) or not any(_within(parent, limit) for limit in limits or [parent]):
            break
        top, depth = parent, depth + 1
    helper = os.path.join(top, module + ".py")
    if _is_package(folder):
        dots = "." * (depth + 1)
        return HelperImport(f"from {dots} import {module}", module, "local", helper, _local_names(os.path.dirname(top)))
    return HelperImport(f"import {module}", module, "firstparty", helper, _local_names(folder) | {module})


def forget_folders() -> None:
    """Drop what was learnt about folders (a new run sees the tree as it is now)."""
    _helper_import_in.cache_clear()
    _local_names.cache_clear()


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _is_package(folder: str) -> bool:
    return os.path.isfile(os.path.join(folder, "__init__.py"))


@functools.lru_cache(maxsize=256)
def _local_names(folder: str) -> frozenset[str]:
    """Modules and packages a folder holds: what isort (run there) counts as first-party."""
    try:
        entries = os.listdir(folder)
    except OSError:
        return frozenset()
    names = set()
    for entry in entries:
        stem, suffix = os.path.splitext(entry)
        if suffix == ".py" and stem.isidentifier():
            names.add(stem)
        elif not suffix and entry.isidentifier() and os.path.isdir(os.path.join(folder, entry)):
            names.add(entry)
    return frozenset(names)


# --------------------------------------------------------------------------- the module's text


@functools.lru_cache(maxsize=1)
def module_text() -> str:
    """The helper module: a header, then accelport.compat's functions, then the visible-devices table."""
    from accelport.runtime import compat

    source = inspect.getsource(compat)
    tree = ast.parse(source)
    pieces = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name in _COPIED:
            pieces[node.name] = ast.get_source_segment(source, node)
    missing = [name for name in _COPIED if name not in pieces]
    if missing:
        raise RuntimeError(f"accelport.compat lacks {', '.join(missing)}, which the helper module copies")
    body = [pieces[name] for name in _COPIED]
    body.append(_visible_devices_code(compat.visible_devices_var.__doc__ or ""))
    exported = sorted({*_COPIED, "visible_devices_var"} - {"_device_type"})
    header = [
        f"{GENERATED_HEADER.decode()} {__version__} from accelport.compat and its vendor profiles; do not edit.",
        "# Migrated code imports it where PyTorch has no device-agnostic API; it needs only torch.",
        "# `accelport migrate` writes the same file on every run (delete it with the code that imports it).",
        '"""Helpers for code migrated by accelport: events, streams, bfloat16 support, visible devices."""',
        "",
        *_IMPORTS,
        "",
        "__all__ = [" + ", ".join(f'"{name}"' for name in exported) + "]",
    ]
    text = "\n".join(header) + "\n\n\n" + "\n\n\n".join(body) + "\n"
    if "accelport." in text.replace("accelport.compat and", "").replace("accelport migrate", ""):
        raise RuntimeError("the helper module would import accelport")
    return text


def _visible_devices_code(doc: str) -> str:
    """visible_devices_var, with the vendor profiles it reads in accelport.compat written out as a table."""
    table = {}
    for profile in knowledge.vendors().values():
        kind = profile.torch_device
        if kind and kind not in table:
            found = knowledge.vendor_for_device(kind)
            if found is not None and found.visible_devices_var:
                table[kind] = found.visible_devices_var
    rocm = knowledge.vendor("rocm").visible_devices_var or table.get("cuda", "")
    default = table.get("cuda", "")
    rows = "".join(f'    "{kind}": "{var}",\n' for kind, var in sorted(table.items()))
    summary = doc.strip().splitlines()[0] if doc.strip() else "The variable that restricts which devices this process sees."
    return (
        "# Device type -> the variable that restricts visible devices (from accelport's vendor profiles).\n"
        f"_VISIBLE_DEVICES = {{\n{rows}}}\n\n\n"
        "def visible_devices_var(device_type: str | None = None) -> str:\n"
        f'    """{summary}"""\n'
        "    import torch\n\n"
        "    kind = device_type or _device_type(None)\n"
        f'    if kind == "cuda" and getattr(torch.version, "hip", None):\n'
        f'        return "{rocm}"\n'
        f'    return _VISIBLE_DEVICES.get(kind, "{default}")'
    )
