"""Rule and codemod modules are found by walking their packages: every file there registers, none is left out."""

from __future__ import annotations

import pkgutil


def _modules(package) -> set[str]:
    return {f"{package.__name__}.{i.name}" for i in pkgutil.iter_modules(package.__path__) if not i.name.startswith("_")}


def test_every_inventory_rule_module_registers_rules():
    from accelport.inventory.python import rules

    rules.load()
    registered = {f.__module__ for funcs in rules.REGISTRY.values() for f in funcs} | {f.__module__ for f in rules.FINALIZERS}
    assert _modules(rules) and _modules(rules) <= registered


def test_every_codemod_module_registers_codemods():
    import sys

    from accelport.migrate import codemods

    registered = {f.__module__ for f in codemods.load().values()}
    assert _modules(codemods) <= set(sys.modules)  # every file was imported by load()
    # imports.py holds the import-statement edits the engine calls itself; every other file registers codemods.
    helpers = {f"{codemods.__name__}.imports"}
    assert _modules(codemods) - helpers and _modules(codemods) - helpers <= registered
