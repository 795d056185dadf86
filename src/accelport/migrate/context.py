"""What the codemods of one file share: how torch is spelled, which device to use, what the module must gain.

The device every rewrite refers to is obtained once per module, in a readable form:

    DEVICE = torch.accelerator.current_accelerator() or torch.device("cpu")

inserted after the imports. Inside a function that already holds a `device` (a
parameter, or a local assigned before the rewritten line), that `device` is reused.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from accelport.knowledge import VendorProfile
from accelport.migrate.edits import Edit, Layout
from accelport.migrate.helpers import PACKAGE_MODULE, HelperImport, module_import
from accelport.migrate.source import Site, SourceIndex, iter_statements

# Names tried, in order, for the module-level device; the first free (or already ours) wins.
DEVICE_NAMES = ("DEVICE", "ACCEL_DEVICE", "ACCELPORT_DEVICE")
COMPAT_MODULE = PACKAGE_MODULE  # what the knowledge files name; `ctx.compat()` says how this file spells it
_SPACES = re.compile(r"\s+")


def canonical_device(torch: str, quote: str = '"') -> str:
    return f"{torch}.accelerator.current_accelerator() or {torch}.device({quote}cpu{quote})"


# A short one-line string literal, and what may not stand right before its opening quote
# (a prefix letter, or another quote): checked by hand, since a leading look-behind makes
# the regex engine try every position instead of jumping from quote to quote.
_SHORT_STRING = re.compile(r"""'[^'"\\\n]{0,40}'|"[^'"\\\n]{0,40}\"""")
_NOT_BEFORE = re.compile(r"""[\w'"]""")


def usual_quote(text: str) -> str:
    """The quote the file mostly writes short strings with (double when it is a tie)."""
    singles = doubles = 0
    search, before = _SHORT_STRING.search, _NOT_BEFORE.match
    position = 0
    while (match := search(text, position, 50_000)) is not None:
        start, end = match.span()
        if start and before(text, start - 1):
            position = end - 1  # not a string start; its closing quote may open one
            continue
        if text[start] == "'":
            singles += 1
        else:
            doubles += 1
        position = end
    return "'" if singles > doubles else '"'


_WORD_CHAR = re.compile(r"\w")


def _has_word(text: str, word: str) -> bool:
    """Does `word` (an identifier) occur in `text` as a whole word, as `\\bword\\b` would find it?

    `str.find` jumps to each occurrence; a regex that starts with `\\b` tries every position.
    """
    at = text.find(word)
    while at >= 0:
        end = at + len(word)
        if not (at and _WORD_CHAR.match(text, at - 1)) and not _WORD_CHAR.match(text, end):
            return True
        at = text.find(word, at + 1)
    return False


def _normal(text: str) -> str:
    return _SPACES.sub("", text).replace("'", '"')


def detect_layout(source: SourceIndex) -> Layout:
    """The file's indentation unit (from its first indented block) and line break."""
    newline = "\n"
    match = re.search(r"\r\n|\n|\r", source.text)
    if match:
        newline = match.group()
    for node in iter_statements(source.tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
            outer = source.indentation(node.lineno)
            inner = source.indentation(body[0].lineno)
            if body[0].lineno != node.lineno and inner.startswith(outer) and len(inner) > len(outer):
                return Layout(indent_unit=inner[len(outer) :], newline=newline)
    return Layout(newline=newline)


@dataclass
class FileContext:
    source: SourceIndex
    target: VendorProfile | None = None
    layout: Layout = field(default_factory=Layout)
    aliases: dict[str, str] = field(default_factory=dict)  # bound name -> qualified name
    needs_device: bool = False
    needs_compat: bool = False
    needs_torch: bool = False
    module_uses: list[int] = field(default_factory=list)  # top-level statement indexes using the module device
    # The whole file's parse, when `source.tree` holds only the statements with findings.
    whole_tree: Callable[[], ast.Module] | None = None
    helper: HelperImport = field(default_factory=module_import)  # where the helpers torch lacks come from
    modules: set[str] = field(default_factory=set)  # standard modules the rewrites use (`collections`)
    _whole_parse: ast.Module | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.layout = detect_layout(self.source)
        self.source.quote = usual_quote(self.source.text)
        for node in iter_statements(self.source.tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        self.aliases[alias.asname] = alias.name
                    else:
                        self.aliases.setdefault(alias.name.split(".")[0], alias.name.split(".")[0])
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    if alias.name != "*":
                        self.aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        self._module_torch = self._module_binding("torch")
        self.device_name, self._device_defined = self._choose_device_name()

    # ----------------------------------------------------------------- names

    def qualname(self, node: ast.AST) -> str | None:
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or node.id not in self.aliases:
            return None
        return ".".join([self.aliases[node.id], *reversed(parts)])

    @property
    def torch(self) -> str:
        """How this module spells `torch` (an `import torch` is added when it has none)."""
        if self._module_torch is None:
            self.needs_torch = True
            return "torch"
        return self._module_torch

    def dist(self) -> str:
        name = self._module_binding("torch.distributed")
        return name if name is not None else f"{self.torch}.distributed"

    def module(self, name: str) -> str:
        """A standard module the rewrite uses (imported when the module does not bind it)."""
        self.modules.add(name)
        return name

    def compat(self) -> str:
        """The name the helpers are reached by (the generated helper module, or accelport.compat)."""
        self.needs_compat = True
        return self.helper.name

    def path(self, qualified: str) -> str:
        """A `torch.x.y` path spelled with this module's torch name."""
        if qualified == "torch" or qualified.startswith("torch."):
            return self.torch + qualified[len("torch") :]
        return qualified

    def _module_binding(self, qualified: str) -> str | None:
        """The name a module-level import binds to `qualified` (`import torch as th` -> th)."""
        found = self._binding(qualified)
        return found[0] if found else None

    def _binding(self, qualified: str) -> tuple[str, int] | None:
        """(bound name, index of the top-level statement holding the import) for `qualified`."""
        for index, stmt in _module_imports(self.source.tree):
            for alias in stmt.names:
                if isinstance(stmt, ast.Import):
                    if alias.asname and alias.name == qualified:
                        return alias.asname, index
                    if not alias.asname and alias.name.split(".")[0] == qualified:
                        return qualified, index
                elif stmt.module and not stmt.level and f"{stmt.module}.{alias.name}" == qualified:
                    return alias.asname or alias.name, index
        return None

    # ----------------------------------------------------------------- the device

    def module_device(self, site: Site | None = None) -> str:
        """The module-level device name, defined after the imports when it is first needed."""
        self.needs_device = True
        self.torch  # noqa: B018 - the definition needs torch
        if site is not None and site.function is None:
            top = self._top_level_index(site.node)
            if top is not None:
                self.module_uses.append(top)
        return self.device_name

    def device(self, site: Site, typed: bool = False) -> str:
        """The device to use at `site`: a `device` the enclosing function already holds, else the module's.

        `typed`: the caller needs a torch.device (it reads `.type`), not a device string.
        """
        function = site.function
        if function is not None:
            kind = _local_device(function, site)
            if kind == "typed" or (kind == "untyped" and not typed):
                return "device"
        return self.module_device(site)

    def device_type(self, site: Site) -> str:
        return f"{self.device(site, typed=True)}.type"

    def _choose_device_name(self) -> tuple[str, bool]:
        for name in DEVICE_NAMES:
            # A name that never appears in the text is certainly free; otherwise ask the whole file.
            if not _has_word(self.source.text, name):
                return name, False
            whole = self._whole()
            if self._defines_our_device(whole, name):
                return name, True
            if name not in _bound_names(whole):
                return name, False
        return DEVICE_NAMES[-1] + "_", False

    def whole(self) -> ast.Module:
        """The whole file's parse (positions as in `source`), even where `source.tree` is partial."""
        if self.whole_tree is None:
            return self.source.tree
        if self._whole_parse is None:
            self._whole_parse = self.whole_tree()
        return self._whole_parse

    _whole = whole

    def _defines_our_device(self, tree: ast.Module, name: str) -> bool:
        torch = self._module_torch or "torch"
        for stmt in tree.body:
            if (
                isinstance(stmt, ast.Assign)
                and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name)
                and stmt.targets[0].id == name
            ):
                return _normal(self.source.text_of(stmt.value)) == _normal(canonical_device(torch))
        return False

    def _top_level_index(self, node: ast.AST) -> int | None:
        chain = [node, *self.source.parent_chain(node)]
        body = self.source.tree.body
        for item in chain:
            for index, stmt in enumerate(body):
                if stmt is item:
                    return index
        return None

    # ----------------------------------------------------------------- module additions

    def insertions(self) -> list[Edit]:
        """Imports and the device definition the rewrites rely on, as zero-width edits.

        An import goes where isort (ruff's I001) puts it: into its section of the module's
        import block, in sorted order, or as a new section in the place of its kind.
        """
        missing = sorted(m for m in self.modules if self._binding(m) is None)
        if not (self.needs_device and not self._device_defined) and not self.needs_compat and not self.needs_torch and not missing:
            return []
        nl = self.layout.newline
        tree = self.source.tree
        body = tree.body
        after_index = _last_leading_import(tree)
        first_use = min(self.module_uses) if self.module_uses else None
        before_code = first_use is not None and (after_index is None or first_use <= after_index)
        torch_binding = self._binding("torch") if self._module_torch is not None else None
        if before_code:
            offset = self.source.line_starts[_first_line(body[first_use]) - 1]
            torch_bound_before = torch_binding is not None and torch_binding[1] < first_use
        elif after_index is not None:
            offset = self.source.line_span(body[after_index].end_lineno, body[after_index].end_lineno)[1]
            torch_bound_before = torch_binding is not None and torch_binding[1] <= after_index
        else:
            offset = self._top_offset()
            torch_bound_before = False
        imports = [(f"import {name}", "stdlib") for name in missing]
        if self.needs_torch or (self.needs_device and not self._device_defined and not torch_bound_before):
            imports.append(("import torch", "thirdparty"))
        if self.needs_compat and not self._imports_compat():
            imports.append((self.helper.statement, self.helper.section))
        blocks = []
        if self.needs_device and not self._device_defined:
            adapter = self._adapter_block()
            if adapter:
                blocks.append(adapter)
            blocks.append(f"{self.device_name} = {canonical_device(self.torch, self.source.quote)}")
        if not imports and not blocks:
            return []
        edits = []
        if not before_code and after_index is not None and _import_block(tree):
            for statement, section in imports:
                edits.append(self._placed_import(statement, section))
            imports = []
        lines: list[str] = []
        if before_code:
            lines += [statement for statement, _section in imports] + ([""] if imports and blocks else []) + blocks + [""]
        else:
            lines += [statement for statement, _section in imports]
            for block in blocks:
                lines += ["", block]
        if lines:
            text = nl.join("\n".join(lines).split("\n")) + nl
            if offset == len(self.source.text) and self.source.text and not self.source.text.endswith(("\n", "\r")):
                text = nl + text
            edits.append(Edit(offset, offset, "insert", text=text))
        return edits

    def _placed_import(self, statement: str, section: str) -> Edit:
        """A zero-width edit adding `statement` to the leading import block where isort would put it."""
        nl = self.layout.newline
        block = _import_block(self.source.tree)
        new = ast.parse(statement).body[0]
        rank = _SECTIONS.index(section)
        key = _import_key(new)
        if isinstance(new, ast.ImportFrom):
            twin = next((s for s in block if isinstance(s, ast.ImportFrom) and (s.module, s.level) == (new.module, new.level)), None)
            merged = self._merged_import(twin, new) if twin is not None else None
            if merged is not None:
                return merged
        same = [s for s in block if _SECTIONS.index(_section_of(s, self.helper.first_party)) == rank]
        if same:
            later = next((s for s in same if _import_key(s) > key), None)
            if later is not None:
                return Edit(*[self.source.line_starts[later.lineno - 1]] * 2, "insert", text=statement + nl)
            return Edit(*[self._end_of(same[-1])] * 2, "insert", text=statement + nl)
        later = next((s for s in block if _SECTIONS.index(_section_of(s, self.helper.first_party)) > rank), None)
        if later is not None:
            return Edit(*[self.source.line_starts[later.lineno - 1]] * 2, "insert", text=statement + nl + nl)
        return Edit(*[self._end_of(block[-1])] * 2, "insert", text=nl + statement + nl)

    def _merged_import(self, twin: ast.ImportFrom, new: ast.ImportFrom) -> Edit | None:
        """`from . import model` + `from . import helper` -> `from . import helper, model`, as isort joins them."""
        line = self.source.line(twin.lineno)
        if twin.end_lineno != twin.lineno or "#" in line or "(" in line or any(a.name == "*" for a in twin.names):
            return None
        names = sorted([*twin.names, *new.names], key=lambda a: _member_key(a.name))
        listed = ", ".join(a.name if a.asname is None else f"{a.name} as {a.asname}" for a in names)
        text = f"from {'.' * twin.level}{twin.module or ''} import {listed}"
        start, end = self.source.start(twin), self.source.end(twin)
        return Edit(start, end, "text", transform=lambda _fragment, _layout: text)

    def _end_of(self, statement: ast.stmt) -> int:
        return self.source.line_span(statement.end_lineno, statement.end_lineno)[1]

    def _adapter_block(self) -> str:
        if self.target is None or not self.target.adapter_import:
            return ""
        module = self.target.adapter_import
        unit = self.layout.indent_unit
        return "\n".join(
            [
                f"# {self.target.name} adapter, for torch builds that do not load it by themselves",
                "try:",
                f"{unit}import {module}  # noqa: F401",
                "except ImportError:",
                f"{unit}pass",
            ]
        )

    def _imports_compat(self) -> bool:
        wanted = ast.dump(ast.parse(self.helper.statement).body[0])
        return any(ast.dump(stmt) == wanted for _index, stmt in _module_imports(self.source.tree))

    def _top_offset(self) -> int:
        """Where to put code in a module without imports: after its docstring or leading comments."""
        body = self.source.tree.body
        if body and _is_docstring(body[0]):
            return self.source.line_span(body[0].end_lineno, body[0].end_lineno)[1]
        if body:
            return self.source.line_starts[_first_line(body[0]) - 1]
        return len(self.source.text)


def _first_line(stmt: ast.stmt) -> int:
    decorators = getattr(stmt, "decorator_list", None)
    return min([stmt.lineno, *(d.lineno for d in decorators)]) if decorators else stmt.lineno


def _is_docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


def _module_imports(tree: ast.Module) -> list[tuple[int, ast.Import | ast.ImportFrom]]:
    """Module-level imports, also inside top-level if/try blocks, with their top-level statement index."""
    found = []
    for index, top in enumerate(tree.body):
        pending = [top]
        while pending:
            stmt = pending.pop(0)
            if isinstance(stmt, ast.Import | ast.ImportFrom):
                found.append((index, stmt))
            elif isinstance(stmt, ast.If | ast.Try):
                pending.extend(stmt.body)
                pending.extend(stmt.orelse)
                pending.extend(getattr(stmt, "finalbody", []))
                for handler in getattr(stmt, "handlers", []):
                    pending.extend(handler.body)
    return found


# isort's sections, in the order it writes them.
_SECTIONS = ("future", "stdlib", "thirdparty", "firstparty", "local")
_DIGITS = re.compile(r"(\d+)")


def _section_of(stmt: ast.Import | ast.ImportFrom, first_party: frozenset[str]) -> str:
    if isinstance(stmt, ast.ImportFrom) and stmt.level:
        return "local"
    module = stmt.module if isinstance(stmt, ast.ImportFrom) else stmt.names[0].name
    top = (module or "").split(".")[0]
    if top == "__future__":
        return "future"
    if top in sys.stdlib_module_names:
        return "stdlib"
    return "firstparty" if top in first_party else "thirdparty"


def _import_key(stmt: ast.Import | ast.ImportFrom) -> tuple:
    """isort's order within a section (ruff's defaults): `import x` before `from x import y`, then by
    module, case-insensitively and with numbers compared as numbers; relative ones furthest first."""
    if isinstance(stmt, ast.ImportFrom):
        module = stmt.module or ""
        return (1, -stmt.level, _natural(module.lower()), module)
    module = stmt.names[0].name
    return (0, 0, _natural(module.lower()), module)


def _member_key(name: str) -> tuple:
    """isort's order of the names in one `from x import ...` (ruff's defaults): CONSTANTS, Classes, then the rest."""
    kind = 0 if len(name) > 1 and name.isupper() else 1 if name[:1].isupper() else 2
    return (kind, _natural(name.lower()), name)


def _natural(text: str) -> tuple:
    return tuple(int(part) if part.isdigit() else part for part in _DIGITS.split(text))


def _import_block(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """The module's last run of plain top-level imports in its leading imports (what isort sorts as one block)."""
    block: list[ast.Import | ast.ImportFrom] = []
    for index, stmt in enumerate(tree.body):
        if index == 0 and _is_docstring(stmt):
            continue
        if isinstance(stmt, ast.Import | ast.ImportFrom):
            block.append(stmt)
        elif _holds_import(stmt):
            block = []
        else:
            break
    return block


def _holds_import(stmt: ast.stmt) -> bool:
    if isinstance(stmt, ast.Import | ast.ImportFrom):
        return True
    if isinstance(stmt, ast.If | ast.Try):
        return any(isinstance(s, ast.Import | ast.ImportFrom) for s in stmt.body)
    return False


def _last_leading_import(tree: ast.Module) -> int | None:
    """Index of the last import in the module's leading run of docstring and imports."""
    last = None
    for index, stmt in enumerate(tree.body):
        if index == 0 and _is_docstring(stmt):
            continue
        if _holds_import(stmt):
            last = index
            continue
        break
    return last


def _bound_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.Global | ast.Nonlocal):
            names.update(node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
    return names


def _device_valued(node: ast.AST) -> bool:
    """Does this expression evaluate to a torch.device (not a device string)?"""
    if isinstance(node, ast.Call):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        return name in ("device", "current_accelerator")
    if isinstance(node, ast.Attribute):
        return node.attr == "device"
    if isinstance(node, ast.Name):
        return node.id in DEVICE_NAMES
    if isinstance(node, ast.IfExp):
        return _device_valued(node.body) and _device_valued(node.orelse)
    if isinstance(node, ast.BoolOp):
        return all(_device_valued(v) for v in node.values)
    return False


def _local_device(function: ast.FunctionDef | ast.AsyncFunctionDef, site: Site) -> str | None:
    """'typed' / 'untyped' when `device` is bound in `function` before the site's statement, else None."""
    kind = None
    args = function.args
    for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
        if arg.arg == "device":
            annotation = ast.unparse(arg.annotation) if arg.annotation is not None else ""
            kind = "typed" if annotation.endswith("torch.device") or annotation == "device" else "untyped"
    chain = [site.node, *site.parents]
    current = next((s for s in function.body if any(s is c for c in chain)), None)
    for stmt in function.body:
        if stmt is current:
            break
        target = value = None
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target, value = stmt.targets[0], stmt.value
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            target, value = stmt.target, stmt.value
        if isinstance(target, ast.Name) and target.id == "device":
            kind = "typed" if _device_valued(value) else "untyped" if _maybe_device(value) else None
    return kind


def _maybe_device(node: ast.AST) -> bool:
    """Could this value be a device string (a literal, an f-string, a `.device`-like name, a conditional of those)?

    `device = torch.cuda.memory_allocated()` holds no device: reusing it would pass a number.
    """
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.Call):  # torch.device(...), get_device(args), current_accelerator()
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        return "device" in name.lower() or _device_valued(node)
    if isinstance(node, ast.Attribute | ast.Name):
        name = node.attr if isinstance(node, ast.Attribute) else node.id
        return "device" in name.lower() or name in DEVICE_NAMES
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and "device" in str(node.slice.value)
    if isinstance(node, ast.IfExp):
        return _maybe_device(node.body) and _maybe_device(node.orelse)
    if isinstance(node, ast.BoolOp):
        return all(_maybe_device(v) for v in node.values)
    return False
