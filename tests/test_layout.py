"""The package's shape (issue 19): no step imports another step's private name, no import cycle at
module level, and no source file grows past 800 lines (the few still over are listed and may only shrink)."""

import ast
import collections
from pathlib import Path

import accelport

PACKAGE = Path(accelport.__file__).parent
LIMIT = 800
# Files allowed over the limit, with the length they may not exceed (generated data only; none today).
OVERSIZE: dict[str, int] = {}


def _modules():
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = ["accelport", *path.relative_to(PACKAGE).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _step(module):
    parts = module.split(".")
    if len(parts) > 2 and parts[1] == "verify" and parts[2] in ("numerics", "perf", "stability"):
        return ".".join(parts[:3])
    return ".".join(parts[:2])


def _imports(module, path, modules):
    """(target module, imported name or None, at module level?) for every accelport import in `path`."""
    tree = ast.parse(path.read_text())
    package = path.name == "__init__.py"

    def visit(nodes, top):
        for node in nodes:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    yield alias.name, None, top
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    here = module.split(".") if package else module.split(".")[:-1]
                    here = here[: len(here) - node.level + 1]
                    base = ".".join(here + ([node.module] if node.module else []))
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    yield (full, None, top) if full in modules else (base, alias.name, top)
            elif isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
                yield from visit(node.body, False)
            elif isinstance(node, ast.If | ast.Try):
                inner = [*node.body, *node.orelse, *getattr(node, "finalbody", [])]
                inner += [n for h in getattr(node, "handlers", []) for n in h.body]
                yield from visit(inner, top)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                yield from visit(node.body, False)  # runs when called, not at import
            elif isinstance(node, ast.ClassDef | ast.With | ast.For):
                yield from visit(node.body, top)  # runs at import when the statement does

    return [(t, n, top) for t, n, top in visit(tree.body, True) if t.startswith("accelport")]


def test_no_step_imports_a_private_name_of_another():
    modules = _modules()
    leaks = []
    for module, path in modules.items():
        for target, name, _ in _imports(module, path, modules):
            private = [p for p in [*target.split("."), name or ""] if p.startswith("_") and not p.startswith("__")]
            if private and _step(target) not in (_step(module), "accelport"):
                leaks.append(f"{module} imports {target}{'.' + name if name else ''}")
    assert leaks == []


# The shared layers below the workflow steps: what a step may build on without reaching into another step.
SHARED = ("accelport.source", "accelport.knowledge")
BASE = {"accelport", "accelport.errors", "accelport.findings", "accelport.fileio", "accelport.textsafe", "accelport.native"}


def test_the_source_layer_builds_on_no_workflow_step():
    """Inventory, migrate and run all read code through accelport.source; it must not import any of them back."""
    modules = _modules()
    upward = []
    for module, path in modules.items():
        if not module.startswith("accelport.source"):
            continue
        for target, name, _ in _imports(module, path, modules):
            if target not in BASE and not target.startswith(SHARED):
                upward.append(f"{module} imports {target}{'.' + name if name else ''}")
    assert upward == []


def test_migrate_and_run_read_files_through_the_source_layer():
    """The walk, the file read once, the markers and the name lookups come from accelport.source, not from
    inventory's internals; inventory's own scanning API (scanners, engine, python) stays open to migrate."""
    modules = _modules()
    internal = ("accelport.inventory.python.context", "accelport.inventory.python.chunks", "accelport.inventory.python.markers")
    reaches = []
    for module, path in modules.items():
        if _step(module) not in ("accelport.migrate", "accelport.runtime"):
            continue
        for target, name, _ in _imports(module, path, modules):
            if target.startswith(internal) or (target == "accelport.inventory.base" and name in ("SourceFile", "ScanSkipped")):
                reaches.append(f"{module} imports {target}{'.' + name if name else ''}")
    assert reaches == []


def test_no_import_cycle_at_module_level():
    modules = _modules()
    edges = collections.defaultdict(set)
    for module, path in modules.items():
        for target, _, top in _imports(module, path, modules):
            if top and target in modules and target != module:
                edges[module].add(target)
    state, cycles = {}, []

    def visit(node, trail):
        state[node] = "open"
        for nxt in edges[node]:
            if state.get(nxt) == "open":
                cycles.append([*trail[trail.index(nxt):], nxt])
            elif nxt not in state:
                visit(nxt, [*trail, nxt])
        state[node] = "done"

    for module in list(modules):
        if module not in state:
            visit(module, [module])
    assert cycles == []


def test_no_source_file_grows_past_the_limit():
    lengths = {
        str(path.relative_to(PACKAGE)): path.read_text().count("\n")
        for path in [*PACKAGE.rglob("*.py"), *PACKAGE.rglob("*.c")]
    }
    too_long = {name: n for name, n in lengths.items() if n > OVERSIZE.get(name, LIMIT)}
    assert too_long == {}
    assert set(OVERSIZE) <= set(lengths)  # a split or renamed file leaves this list


def test_the_checks_see_a_planted_cycle_and_private_import(tmp_path):
    planted = tmp_path / "a.py"
    planted.write_text("from accelport.inventory._chunks import x\nimport accelport.b\n")
    found = _imports("accelport.migrate.a", planted, {"accelport.b": None})
    assert ("accelport.inventory._chunks", "x", True) in found and ("accelport.b", None, True) in found
