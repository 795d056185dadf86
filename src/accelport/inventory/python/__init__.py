"""The Python scanner: one `ast` walk per file (and per notebook cell), rules registered by node kind."""

from __future__ import annotations

import ast
import json
import re
import warnings

from accelport.findings import Finding
from accelport.inventory.base import FileScanner, ScanSkipped, SourceFile
from accelport.inventory.python.context import PyContext
from accelport.inventory.python.rules import FINALIZERS, REGISTRY, load

load()

# Bytes that any Python finding needs; a file without one is never parsed.
PYTHON_TOKENS = re.compile(
    rb"cuda|CUDA|nccl|NCCL|cudnn|nvtx|DataParallel|cpp_extension|flash_attn|apex|amp_C|xformers|bitsandbytes"
    rb"|cupy|pycuda|numba|transformer_engine|deepspeed|vllm|triton|pynvml|dali|tensorrt|cudf|cuml|flashinfer"
    rb"|mamba_ssm|causal_conv1d|pin_memory|GradScaler|CUBLAS|CUFFT|NVIDIA|NVTE"
)


def walk(ctx: PyContext, tree: ast.AST) -> None:
    """Pre-order walk in source order, so imports are bound before the code that uses them."""
    registry = REGISTRY
    stack = [tree]
    while stack:
        node = stack.pop()
        rules = registry.get(type(node))
        if rules:
            for rule in rules:
                rule(ctx, node)
        children = []
        for child in ast.iter_child_nodes(node):
            child.ap_parent = node
            children.append(child)
        stack.extend(reversed(children))
    for finalize in FINALIZERS:
        finalize(ctx)


def scan_python_text(source: SourceFile, text: str, cell: int | None = None) -> list[Finding]:
    """Findings for one piece of Python source (a file, or a notebook cell)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)  # invalid escapes etc. are the user's business
        try:
            tree = ast.parse(text, filename=source.display)
        except SyntaxError as exc:
            where = f"cell {cell}, line {exc.lineno}" if cell is not None else f"line {exc.lineno}"
            raise ScanSkipped(f"does not parse as Python ({where}: {exc.msg}); fix the syntax or exclude the file") from None
        except (ValueError, MemoryError) as exc:
            raise ScanSkipped(f"does not parse as Python ({exc})") from None
    ctx = PyContext(source, text.splitlines(), cell)
    walk(ctx, tree)
    return ctx.findings


class PythonScanner(FileScanner):
    name = "python"
    suffixes = (".py", ".pyi", ".pyw")
    prefilter = PYTHON_TOKENS

    def scan(self, source: SourceFile) -> list[Finding]:
        return scan_python_text(source, source.text)


_MAGIC = re.compile(r"^\s*[%!]")


class NotebookScanner(FileScanner):
    """Jupyter notebooks, cell by cell; locations are relative to the cell (1-based cell numbers)."""

    name = "notebook"
    suffixes = (".ipynb",)
    prefilter = PYTHON_TOKENS

    def scan(self, source: SourceFile) -> list[Finding]:
        try:
            notebook = json.loads(source.text)
        except json.JSONDecodeError as exc:
            raise ScanSkipped(f"not a valid notebook (JSON error at line {exc.lineno}: {exc.msg})") from None
        cells = notebook.get("cells") if isinstance(notebook, dict) else None
        if not isinstance(cells, list):
            raise ScanSkipped("not a valid notebook (no cells list); is it an nbformat 4 file?")
        findings: list[Finding] = []
        for number, cell in enumerate(cells, 1):
            if not isinstance(cell, dict) or cell.get("cell_type") != "code":
                continue
            raw = cell.get("source", "")
            text = "".join(raw) if isinstance(raw, list) else str(raw)
            # IPython magics and shell escapes are not Python: blank them, keeping line numbers.
            text = "\n".join("" if _MAGIC.match(line) else line for line in text.split("\n"))
            if not PYTHON_TOKENS.search(text.encode("utf-8", "replace")):
                continue
            findings.extend(scan_python_text(source, text, cell=number))
        return findings
