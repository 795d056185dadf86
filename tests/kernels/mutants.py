"""Planted faults for the mutation tests: a copy of an operator's module with one line changed."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import itertools
import sys
from pathlib import Path
from types import ModuleType

_serial = itertools.count()


def load_copy(module_name: str, folder: Path, old: str = "", new: str = "", occurrence: int = 0) -> ModuleType:
    """Import a copy of `module_name` from `folder`, with the `occurrence`-th `old` replaced by `new`.

    The copy is a real file (the Triton interpreter and JIT read kernel source from
    disk). A mutation whose `old` text no longer occurs fails loudly, so a refactor
    cannot turn a mutation test into one that passes without planting anything.
    """
    source = inspect.getsource(importlib.import_module(module_name))
    if old:
        count = source.count(old)
        assert count > occurrence, f"{module_name}: {old!r} occurs {count} times; the mutation no longer applies"
        start = -1
        for _ in range(occurrence + 1):
            start = source.index(old, start + 1)
        source = source[:start] + new + source[start + len(old):]
    name = f"accelport_mutant_{module_name.rsplit('.', 1)[-1]}_{next(_serial)}"
    path = folder / f"{name}.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
