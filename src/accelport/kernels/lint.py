"""Lint for portable Triton kernels: constructs that break on Triton 3.9, under the interpreter, or off NVIDIA.

The checks read the AST (never the text), so a name in a comment or a string
is not a finding.

    KL001  tl.make_block_ptr / tl.advance     removed in Triton 3.9 on every backend; use tensor descriptors or pointer tiles
    KL002  libdevice                          returns None under the interpreter; vendor-specific; use tl.math or tl_compat
    KL003  inline_asm_elementwise             PTX/GCN text: not portable, not supported by the interpreter
    KL004  tl.dot outside tl_compat           bf16 tl.dot is wrong under the interpreter (triton#11584); use tl_compat.dot
    KL005  import triton in a kernel module    kernels take triton/tl from tl_compat (interpreter mode, missing triton)
    KL006  triton.autotune                    fails under the interpreter; configs come from accelport.kernels.configs
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from accelport.errors import UserError

RULES = {
    "KL001": "tl.make_block_ptr/tl.advance were removed in Triton 3.9; use pointer tiles or tensor descriptors",
    "KL002": "libdevice returns None under the Triton interpreter and is vendor-specific; use tl.math or tl_compat",
    "KL003": "inline_asm_elementwise is vendor assembly and unsupported by the interpreter",
    "KL004": "raw tl.dot gives wrong bf16 results under the interpreter (triton#11584); use tl_compat.dot",
    "KL005": "import triton through accelport.kernels.tl_compat, which knows the interpreter mode",
    "KL006": "triton.autotune fails under the interpreter; choose configs with accelport.kernels.configs",
}
COMPAT_MODULE = "tl_compat.py"


@dataclass(frozen=True)
class LintFinding:
    path: str
    line: int
    code: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.code} {self.message}"

    def to_dict(self) -> dict[str, object]:
        return {"path": self.path, "line": self.line, "code": self.code, "message": self.message}


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def lint_source(source: str, path: str) -> list[LintFinding]:
    """Findings for one Python source text; `path` names it in the findings."""
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as exc:
        raise UserError(f"{path}: cannot parse ({exc.msg} at line {exc.lineno}); fix the syntax first") from None
    is_compat = Path(path).name == COMPAT_MODULE
    defines_kernels = any(
        isinstance(node, ast.FunctionDef) and any(_dotted(d.func if isinstance(d, ast.Call) else d).endswith(".jit") for d in node.decorator_list)
        for node in ast.walk(tree)
    )
    found: list[LintFinding] = []

    def add(node: ast.AST, code: str) -> None:
        found.append(LintFinding(path, getattr(node, "lineno", 0), code, RULES[code]))

    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [alias.name for alias in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            names = [alias.name for alias in node.names]
            if any("libdevice" in m for m in modules) or "libdevice" in names:
                add(node, "KL002")
            elif defines_kernels and not is_compat and any(m == "triton" or m.startswith("triton.") for m in modules):
                add(node, "KL005")
        elif isinstance(node, ast.Attribute):
            name = _dotted(node)
            last = name.rsplit(".", 1)[-1]
            if last in ("make_block_ptr", "advance") and name.startswith(("tl.", "triton.language")):
                add(node, "KL001")
            elif last == "libdevice":
                add(node, "KL002")
            elif last == "inline_asm_elementwise":
                add(node, "KL003")
            elif name in ("tl.dot", "triton.language.dot") and not is_compat:
                add(node, "KL004")
            elif name == "triton.autotune":
                add(node, "KL006")
    return sorted(found, key=lambda f: (f.line, f.code))


def lint_paths(paths: Iterable[str | Path]) -> list[LintFinding]:
    """Lint Python files (folders are walked for *.py)."""
    found: list[LintFinding] = []
    for path in map(Path, paths):
        files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
        for file in files:
            try:
                source = file.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise UserError(f"{file}: cannot read ({exc}); pass Python source files") from None
            found.extend(lint_source(source, str(file)))
    return found


def lint_package() -> list[LintFinding]:
    """Lint accelport's own operator modules."""
    return lint_paths([Path(__file__).parent])
