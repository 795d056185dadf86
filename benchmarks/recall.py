"""Inventory recall on real trees: every live grep hit of the CUDA seed pattern, and whether a finding covers it.

The oracle is independent of the inventory: Python is lexed with the standard
library's `tokenize`; C, C++ and CUDA with the small lexer below, which blanks
comments, string and character literals and preprocessor-dead code (`#if 0` and
its nested groups) while keeping `#include` header names. A grep hit is *live*
when the match lies in what is left. Each live hit is classified:

- `real`: a use of CUDA — a CUDA API, library, type, macro or namespace word
  (`cudaMalloc`, `cublasLtMatmul`, `at::cuda`, `getCurrentCUDAStream`, `__CUDA_ARCH__`),
  a Python name `cuda`/`cudnn`/`nccl`/`nvtx` in an attribute chain (`torch.version.cuda`),
  a device, backend or CUDA environment-variable string (`"cuda:0"`, `"nccl"`,
  `"CUDA_VISIBLE_DEVICES"`), an import of a CUDA module or extension, a system CUDA
  header, or a project function or macro whose body calls a CUDA library (a wrapper);
- `identifier`: a project identifier that merely contains a token (`nccl_init_method`,
  `use_cuda_graph`, `layer_norm_cuda`): left alone by design;
- `other`: an `#include` of the project's own header whose name holds a token.

A hit is *covered* when an inventory finding sits on its line (or spans it), or
the finding is file-level (line 0). A finding whose start lies in a comment, an
inert string or dead code is a false positive. Prints one JSON object (per tree:
counts, recall of real uses, false positives, and with `--misses` every
uncovered real use); `--table` prints the Markdown table of docs/inventory.md.

    python benchmarks/recall.py TREE... [--misses] [--table] [--jobs N]
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import os
import re
import sys
import time
import tokenize
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

# The seed pattern: the tokens a reviewer greps for first.
SEED = re.compile(r"cuda|cudnn|cublas|cufft|curand|cusolver|cusparse|nccl|nvtx|nvrtc|cupti", re.IGNORECASE)
PYTHON_SUFFIXES = (".py", ".pyi", ".pyw")
CXX_SUFFIXES = (".cu", ".cuh", ".c", ".cc", ".cpp", ".cxx", ".c++", ".h", ".hh", ".hpp", ".hxx", ".inl", ".ipp", ".tcc")
SKIP_DIRS = frozenset({".git", ".hg", ".svn", "__pycache__", "node_modules", ".venv", "venv"})

_WORD = re.compile(r"[A-Za-z0-9_]+")
# Value strings that are CUDA uses: devices, backends, CUDA environment variables.
_VALUE_STRING = re.compile(r"cuda(?::\d*|:\{\w*\}|:%d)?|nccl|CUDA|(?:PYTORCH_|TORCH_)?(?:CUDA|NCCL|CUDNN|CUBLAS|CUBLASLT|CUFFT|NVTX)_[A-Z0-9_]+")
_PY_API_WORDS = frozenset({"cuda", "cudnn", "nccl", "nvtx", "is_cuda", "emit_nvtx", "CUDA_HOME", "is_nccl_available"})
# Library-style names: a CUDA library prefix followed by an upper-case letter, a digit or
# `_` + upper case (cudaMalloc, cublasLtMatmul, ncclComm_t, CUBLAS_OP_N, cuda_bf16?).
_PREFIX = r"(?:cuda|cudnn|cublas|cublasLt|cufft|curand|cusolver|cusparse|nccl|nvtx|nvtx3|nvrtc|cupti)"
_CAPS_PREFIX = r"(?:__)?(?:CUDA|CUDNN|CUBLAS|CUBLASLT|CUFFT|CURAND|CUSOLVER|CUSPARSE|NCCL|NVTX|NVRTC|CUPTI|CUDART|CU|AT_CUDA|C10_CUDA|TORCH_CUDA)"
_LIB_NAME = re.compile(
    rf"(?:__)?{_PREFIX}[A-Z0-9]\w*|cudnn_frontend|nvtx3"  # cudaMalloc, cublasLtMatmul, ncclComm_t
    rf"|{_CAPS_PREFIX}_[A-Z0-9_]+|__CUDA\w*"  # CUBLAS_OP_N, CUDART_VERSION, __CUDA_ARCH__, AT_CUDA_CHECK
    r"|\w*[a-z0-9]CUDA\w*|CUDA[A-Z][a-z]\w*|k?CUDA"  # getCurrentCUDAStream, CUDAGuard, kCUDA
)


@dataclass
class Hit:
    path: str
    line: int
    column: int  # 0-based
    word: str
    kind: str  # real | identifier | other
    text: str


@dataclass
class FileOracle:
    path: str = ""
    hits: list[Hit] = field(default_factory=list)  # live hits
    inert: list[tuple[int, int, int]] = field(default_factory=list)  # (line, start col, end col) of inert regions
    inert_hits: int = 0
    error: str | None = None


# --------------------------------------------------------------------------- Python


def python_oracle(path: str, text: str, project: frozenset[str] = frozenset()) -> FileOracle:
    """Live hits of the seed pattern in Python source, by token.

    `project`: the tree's own top-level packages; a name reached through one of them
    (`deepspeed.utils.nvtx`, `from torchao.kernels import mxfp8_quantize_cuda`) is the
    project's identifier, not a CUDA use.
    """
    result = FileOracle(path)
    lines = text.splitlines()
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError) as exc:
        result.error = f"tokenize: {exc}"
        return result
    import_line: set[int] = set()
    imported, cuda_import_lines = _cuda_imports(tokens, import_line, project)
    previous = before = None  # the last two significant tokens
    roots: list[str] = []  # the first name of the dotted chain each NAME token sits in
    for token in tokens:
        if token.type not in (tokenize.COMMENT, tokenize.STRING, tokenize.NAME):
            if token.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
                previous, before = token, previous
            continue
        start_line, start_col = token.start
        if token.type == tokenize.NAME:
            attribute = previous is not None and previous.string == "."
            owner = before.string if attribute and before is not None else ""
            roots.append(roots[-1] if attribute and roots else token.string)
            previous, before = token, previous
            if SEED.search(token.string):
                word = token.string
                if start_line in import_line:
                    kind = "real" if start_line in cuda_import_lines else "identifier"
                elif attribute and roots[-1] in project:
                    kind = "identifier"
                else:
                    kind = _python_kind(word, False, attribute, word in imported, owner)
                result.hits.append(Hit(path, start_line, start_col, word, kind, lines[start_line - 1].strip()))
            continue
        if token.type == tokenize.STRING:
            previous, before = token, previous
        if token.string.lstrip("rRbBuU").lower().startswith("f") and "{" in token.string:
            _fstring(result, token, lines, import_line)
            continue
        live = False
        value = None
        if token.type == tokenize.STRING:
            try:
                value = ast.literal_eval(token.string)
            except (ValueError, SyntaxError, MemoryError):
                value = None
            live = isinstance(value, str) and _VALUE_STRING.fullmatch(value) is not None
        count = len(SEED.findall(token.string))
        if live and count:
            result.hits.append(Hit(path, start_line, start_col, value, "real", lines[start_line - 1].strip()))
            continue
        _inert(result, token.start, token.end, count)
    return result


def _inert(result: FileOracle, start: tuple[int, int], end: tuple[int, int], count: int) -> None:
    """A comment or string holding `count` seed matches: a finding that starts there is a false positive."""
    result.inert_hits += count
    if not count:
        return  # no CUDA token: a finding there (an op name, a build flag) was not set off by one
    (start_line, start_col), (end_line, end_col) = start, end
    for line in range(start_line, end_line + 1):
        first = start_col if line == start_line else 0
        last = end_col if line == end_line else 10**9
        result.inert.append((line, first, last))


def _fstring(result: FileOracle, token: tokenize.TokenInfo, lines: list[str], import_line: set[int]) -> None:
    """An f-string (one token before Python 3.12): literal parts are inert, `{...}` fields are code."""
    text = token.string
    line, column = token.start
    i, depth, literal_from = 0, 0, (line, column)
    positions = []
    for char in text:  # (line, column) of every character
        positions.append((line, column))
        if char == "\n":
            line, column = line + 1, 0
        else:
            column += 1
    positions.append((line, column))
    fields = []
    while i < len(text):
        char = text[i]
        if depth == 0 and text.startswith("{{", i):
            i += 2
            continue
        if char == "{":
            if depth == 0:
                fields.append([i + 1, None])
            depth += 1
        elif char == "}" and depth:
            depth -= 1
            if depth == 0:
                fields[-1][1] = i
        i += 1
    literal_from = 0
    for start, end in fields:
        if end is None:
            break
        piece = text[literal_from : start - 1]
        if re.search(r"""['"]cuda:$""", piece):
            result.hits.append(Hit(result.path, positions[start][0], positions[start][1], "cuda:", "real", lines[positions[start][0] - 1].strip()))
        else:
            _inert(result, positions[literal_from], positions[start], len(SEED.findall(piece)))
        for match in re.finditer(r"[A-Za-z_][A-Za-z0-9_]*", text[start:end]):
            if SEED.search(match.group()):
                at = positions[start + match.start()]
                before = text[start + match.start() - 1] if match.start() else ""
                kind = _python_kind(match.group(), at[0] in import_line, before == ".")
                result.hits.append(Hit(result.path, at[0], at[1], match.group(), kind, lines[at[0] - 1].strip()))
        literal_from = end
    _inert(result, positions[literal_from], positions[-1], len(SEED.findall(text[literal_from:])))


def _cuda_imports(tokens: list[tokenize.TokenInfo], import_line: set[int], project: frozenset[str]) -> tuple[set[str], set[int]]:
    """Fill `import_line` with the lines of import statements; return the names bound from CUDA modules and the
    lines of the statements that import one.

    A CUDA module is one outside the project whose dotted path holds a seed token (`torch.cuda`,
    `numba.cuda`, `fused_layer_norm_cuda`), or torch's extension builder for the names
    holding one (`from torch.utils.cpp_extension import CUDA_HOME`).
    """
    bound: set[str] = set()
    cuda_lines: set[int] = set()
    statement: list[tokenize.TokenInfo] = []
    logical_start = True
    for token in tokens:
        if token.type in (tokenize.NEWLINE, tokenize.ENDMARKER) or (token.type == tokenize.OP and token.string == ";"):
            if statement:
                lines = range(statement[0].start[0], token.start[0] + 1)
                import_line.update(lines)
                if _bind(statement, bound, project):
                    cuda_lines.update(lines)
            statement = []
            logical_start = True
            continue
        if token.type in (tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.COMMENT):
            continue
        if logical_start and token.type == tokenize.NAME and token.string in ("import", "from"):
            statement = [token]
        elif statement:
            statement.append(token)
        logical_start = False
    return bound, cuda_lines


def _bind(statement: list[tokenize.TokenInfo], bound: set[str], project: frozenset[str]) -> bool:
    """Record the names a CUDA import binds; is it one?"""
    words = [t.string for t in statement if t.type in (tokenize.NAME, tokenize.OP)]
    if words[0] == "from" and "import" in words:
        module = "".join(words[1 : words.index("import")])
        names = [w for w in words[words.index("import") + 1 :] if w not in (",", "(", ")", "as", "*")]
        if module.startswith(".") or module.split(".")[0] in project:
            return False
        if SEED.search(module):
            bound.update(names)
            return True
        if module.startswith("torch."):
            chosen = [n for n in names if SEED.search(n)]
            bound.update(chosen)
            return bool(chosen)
        return False
    found = False
    for part in " ".join(words[1:]).split(","):
        pieces = part.split()
        module = pieces[0].replace(" ", "") if pieces else ""
        # `import cupy`, `import fused_layer_norm_cuda as fln`: the import is the use; later
        # `fln.forward(...)` calls are the module's, judged by their own words.
        found = found or bool(module and SEED.search(module) and module.split(".")[0] not in project)
    return found


_ENUM_OWNERS = frozenset({"ProfilerActivity", "DeviceType", "DispatchKey", "Backend"})


def _python_kind(word: str, in_import: bool, attribute: bool = False, imported: bool = False, owner: str = "") -> str:
    if in_import or imported:
        return "real"  # an import of a CUDA module, or a name one bound (CUDA_HOME, CUDAGraph)
    if attribute and word in ("CUDA", "NCCL"):
        return "real" if owner in _ENUM_OWNERS else "identifier"  # ProfilerActivity.CUDA; a project enum's member
    if attribute and (word in _PY_API_WORDS or (_LIB_NAME.fullmatch(word) and not word.isupper())):
        return "real"  # torch.version.cuda, x.is_cuda, x.cuda(), lib.cudaMalloc through ctypes
    return "identifier"  # use_cuda, nccl_init_method, is_cuda=True, CUDAOpBuilder, CUDA_AVAILABLE


# --------------------------------------------------------------------------- C, C++, CUDA

_DIRECTIVE = re.compile(r"[ \t]*#[ \t]*(\w+)(.*)")
_DEAD_IF = re.compile(r"\s*(?:0|false)\s*$|\s*\(\s*0\s*\)\s*$")


def cxx_live_text(text: str) -> tuple[str, list[tuple[int, int]]]:
    """The source with comments, literals and `#if 0` groups blanked (same length); and the blanked offset spans.

    `#include` header names stay: a system CUDA header is a use.
    """
    out = list(text)
    blanked: list[tuple[int, int]] = []

    def blank(start: int, end: int) -> None:
        for i in range(start, end):
            if out[i] != "\n":
                out[i] = " "
        if end > start:
            blanked.append((start, end))

    i, n = 0, len(text)
    line_start = True
    in_include = False
    while i < n:
        c = text[i]
        if c == "\n":
            line_start, in_include = True, False
            i += 1
            continue
        if line_start and c in " \t":
            i += 1
            continue
        if line_start and c == "#":
            match = re.match(r"#[ \t]*include\b", text[i:])
            in_include = match is not None
        line_start = False
        if c == "/" and text.startswith("//", i):
            end = i
            while end < n and text[end] != "\n":
                end += 2 if text[end] == "\\" and end + 1 < n and text[end + 1] == "\n" else 1
            blank(i, end)
            i = end
        elif c == "/" and text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            blank(i, end)
            i = end
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            match = re.match(r'R"([^()\\ \n]{0,16})\(', text[i:])
            if match is None:
                i += 1
                continue
            end = text.find(")" + match.group(1) + '"', i)
            end = n if end < 0 else end + len(match.group(1)) + 2
            blank(i, end)
            i = end
        elif c in "\"'":
            if c == "'" and i and (text[i - 1].isalnum()) and text[i - 1 : i + 1] != "u'" and i + 1 < n and text[i + 1].isdigit():
                i += 1  # a C++14 digit separator (1'000)
                continue
            end = i + 1
            while end < n and text[end] != c and text[end] != "\n":
                end += 2 if text[end] == "\\" else 1
            end = min(end + 1, n)
            if in_include and c == '"':
                i = end  # `#include "header.h"`: the name is kept
                continue
            blank(i, end)
            i = end
        elif c == "<" and in_include:
            end = text.find(">", i)
            i = n if end < 0 else end + 1
        else:
            i += 1
    live = "".join(out)
    return _blank_dead_groups(live, blank, out), blanked


def _blank_dead_groups(live: str, blank, out: list[str]) -> str:
    """Blank `#if 0` (and `#if false`) groups up to their `#else`/`#elif`/`#endif`, nesting respected."""
    offset = 0
    stack: list[tuple[bool, int]] = []  # (this group dead?, where its dead part started)
    for line in live.split("\n"):
        match = _DIRECTIVE.match(line)
        end = offset + len(line)
        if match:
            name, rest = match.group(1), match.group(2)
            if name in ("if", "ifdef", "ifndef"):
                dead = name == "if" and _DEAD_IF.match(rest) is not None
                stack.append((dead, end + 1))
            elif name in ("elif", "else") and stack:
                dead, started = stack[-1]
                if dead:
                    blank(started, offset)
                    stack[-1] = (False, end + 1)
            elif name == "endif" and stack:
                dead, started = stack.pop()
                if dead:
                    blank(started, offset)
        offset = end + 1
    return "".join(out)


_FUNCTION_DEF = re.compile(r"\b([A-Za-z_]\w*)\s*\([^;{}()]*(?:\([^;{}()]*\)[^;{}()]*)*\)\s*(?:const\s*)?(?:noexcept\s*)?\{")
_MACRO_DEF = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)(.*(?:\\\n.*)*)", re.MULTILINE)
_CONTROL = frozenset({"if", "for", "while", "switch", "return", "sizeof", "catch", "defined"})


def cxx_wrappers(live: str) -> tuple[set[str], set[str]]:
    """Names of functions and macros defined here whose body names a CUDA library name; and every name defined."""
    found = set()
    defined = set()
    for match in _MACRO_DEF.finditer(live):
        defined.add(match.group(1))
        if _library_words(match.group(2), macro=True):
            found.add(match.group(1))
    for match in _FUNCTION_DEF.finditer(live):
        name = match.group(1)
        if name in _CONTROL:
            continue
        defined.add(name)
        depth, i = 1, match.end()
        while i < len(live) and depth:
            depth += {"{": 1, "}": -1}.get(live[i], 0)
            i += 1
        if _library_words(live[match.end() : i]):
            found.add(name)
    for match in re.finditer(r"\b(?:struct|class|enum|namespace)\s+([A-Za-z_]\w*)", live):
        defined.add(match.group(1))
    return found, defined


# What a wrapper forwards to: a call of a CUDA C library or runtime function (not PyTorch's at::cuda
# C++ API, not a kernel launch), or, in a macro, a CUDA library constant (`CUDA_R_16BF`).
_C_API_CALL = re.compile(r"\b(?:cuda|cublas|cublasLt|cudnn|cufft|curand|cusolver|cusparse|nccl|nvtx|nvrtc|cupti|cu)[A-Z]\w*\s*\(")
_C_CONSTANT = re.compile(r"\b(?:CUDA|CUBLAS|CUBLASLT|CUDNN|NCCL|CUFFT|CURAND|CUSPARSE|CUSOLVER)_[A-Z0-9_]+\b")


def _library_words(body: str, macro: bool = False) -> bool:
    return _C_API_CALL.search(body) is not None or (macro and _C_CONSTANT.search(body) is not None)


def cxx_oracle(path: str, text: str, wrappers: set[str], defined: set[str], headers: set[str]) -> FileOracle:
    result = FileOracle(path)
    live, blanked = cxx_live_text(text)
    starts = [0]
    for i, c in enumerate(text):
        if c == "\n":
            starts.append(i + 1)
    lines = text.split("\n")

    def position(offset: int) -> tuple[int, int]:
        import bisect

        line = bisect.bisect_right(starts, offset)
        return line, offset - starts[line - 1]

    for match in SEED.finditer(text):
        start = match.start()
        if live[start] == " ":
            result.inert_hits += 1
            continue
        a = start
        while a and (live[a - 1].isalnum() or live[a - 1] == "_"):
            a -= 1
        b = match.end()
        while b < len(live) and (live[b].isalnum() or live[b] == "_"):
            b += 1
        if result.hits and result.hits[-1].column == a - starts[position(a)[0] - 1] and result.hits[-1].line == position(a)[0]:
            continue  # a second token inside the same word
        line, column = position(a)
        word = live[a:b]
        result.hits.append(Hit(path, line, column, word, _cxx_kind(word, lines[line - 1], wrappers, defined, headers), lines[line - 1].strip()))
    for start, end in blanked:
        if not SEED.search(text, start, end):
            continue
        line, column = position(start)
        end_line, end_column = position(end)
        for number in range(line, end_line + 1):
            result.inert.append((number, column if number == line else 0, end_column if number == end_line else 10**9))
    return result


def _cxx_kind(word: str, line: str, wrappers: set[str], defined: set[str], headers: set[str]) -> str:
    include = re.match(r'\s*#\s*include\s*[<"]([^>"]+)', line)
    if include:
        return "other" if os.path.basename(include.group(1)) in headers else "real"
    if word in wrappers:
        return "real"  # a project wrapper over a CUDA library (cudaCheck, matmul_cublaslt, NvtxRange)
    if word in defined:
        return "identifier"  # the project's own name: an include guard, a config macro, a kernel
    if word in ("cuda", "CUDA", "cudnn", "nccl", "cub") or _LIB_NAME.fullmatch(word):
        return "real"
    return "identifier"


# --------------------------------------------------------------------------- the run


def tree_files(root: Path) -> list[Path]:
    files = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        for name in sorted(names):
            if name.endswith(PYTHON_SUFFIXES + CXX_SUFFIXES):
                files.append(Path(folder) / name)
    return files


def _project_packages(root: Path) -> set[str]:
    """Top-level package and module names of the tree (at its root and under src/)."""
    names = set()
    for base in (root, root / "src"):
        if base.is_dir():
            for entry in base.iterdir():
                if entry.is_dir() and ((entry / "__init__.py").exists() or any(entry.glob("*.py"))):
                    names.add(entry.name)
                elif entry.suffix == ".py":
                    names.add(entry.stem)
    return names


def oracle(root: Path) -> tuple[list[FileOracle], Counter]:
    files = tree_files(root)
    texts = {}
    for path in files:
        try:
            texts[path] = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
    cxx = [p for p in texts if p.name.endswith(CXX_SUFFIXES)]
    headers = {p.name for p in cxx}
    wrappers: set[str] = set()
    defined: set[str] = set()
    for path in cxx:
        found, names = cxx_wrappers(cxx_live_text(texts[path])[0])
        wrappers |= found
        defined |= names
    project = frozenset(_project_packages(root))
    results = []
    notes: Counter = Counter()
    for path, text in texts.items():
        display = str(path)
        if path.name.endswith(PYTHON_SUFFIXES):
            results.append(python_oracle(display, text, project))
        else:
            results.append(cxx_oracle(display, text, wrappers, defined, headers))
        if results[-1].error:
            notes["untokenizable files"] += 1
    return results, notes


_RANK = {"real": 2, "other": 1, "identifier": 0}
# Findings located on a string by design, whatever it holds: an operator's registered name
# (`m.def("get_nccl_id", ...)`, AP5020). They are not set off by a CUDA token in the string.
_ABOUT_A_STRING = frozenset({"AP5020"})


def measure(root: Path, jobs: int | None, show_misses: bool) -> dict:
    """One tree: the oracle's live hit lines, the inventory's findings, and how they meet."""
    from accelport.inventory import scan

    started = time.perf_counter()
    report = scan([str(root)], jobs=jobs)
    inventory_seconds = time.perf_counter() - started
    by_line: dict[str, set[int]] = {}
    symbols: dict[str, set[str]] = {}  # types and constants are reported once per file, with the use count
    file_level: set[str] = set()
    starts: dict[str, list[tuple[int, int, str]]] = {}
    for finding in report.findings:
        location = finding.location
        if location.cell is not None:
            continue
        path = str(Path(location.path).resolve())
        if location.line <= 0:
            file_level.add(path)
            continue
        by_line.setdefault(path, set()).update(range(location.line, location.end_line + 1))
        # `at::cuda::CUDAGuard` counts for the hit on `CUDAGuard` and on `cuda` in the same file.
        symbols.setdefault(path, set()).update({finding.symbol, *finding.symbol.split("::")})
        starts.setdefault(path, []).append((location.line, location.column - 1, finding.rule_id))
    results, notes = oracle(root)
    kinds: Counter = Counter()
    covered: Counter = Counter()
    misses = []
    false_positives = []
    for result in results:
        path = str(Path(result.path).resolve())
        lines: dict[int, list[Hit]] = {}
        for hit in result.hits:
            lines.setdefault(hit.line, []).append(hit)
        for number, hits in lines.items():
            kind = max((h.kind for h in hits), key=_RANK.__getitem__)
            kinds[kind] += 1
            if path in file_level or number in by_line.get(path, ()) or any(h.word in symbols.get(path, ()) for h in hits):
                covered[kind] += 1
            elif kind == "real":
                words = ",".join(sorted({h.word for h in hits if h.kind == "real"}))
                misses.append(f"{os.path.relpath(result.path, root)}:{number}: [{words}] {hits[0].text[:160]}")
        for line, column, rule in starts.get(path, []):
            if rule in _ABOUT_A_STRING:
                continue
            if any(line == number and a <= column < b for number, a, b in result.inert):
                false_positives.append(f"{os.path.relpath(result.path, root)}:{line}:{column + 1}: {rule}")
    real = kinds["real"]
    summary = {
        "tree": root.name,
        "files": len(results),
        "live_hit_lines": sum(kinds.values()),
        "real_use": real,
        "identifier_only": kinds["identifier"],
        "other": kinds["other"],
        "real_use_covered": covered["real"],
        "identifier_only_covered": covered["identifier"],
        "real_use_recall": round(covered["real"] / real, 4) if real else 1.0,
        "inert_hits": sum(r.inert_hits for r in results),
        "false_positives_in_comments_strings": len(false_positives),
        "inventory_findings": len(report.findings),
        "inventory_seconds": round(inventory_seconds, 2),
        "skipped_by_inventory": len(report.skipped),
        "notes": dict(notes),
        "misses": misses if show_misses else len(misses),
    }
    if false_positives:
        summary["false_positive_sites"] = false_positives[:50]
    return summary


def table(rows: list[dict]) -> str:
    head = "| tree | files | live hit lines | real use | identifier only | other | real use covered | recall | FP in comments/strings |"
    lines = [head, "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        lines.append(
            f"| {row['tree']} | {row['files']} | {row['live_hit_lines']} | {row['real_use']} | {row['identifier_only']} "
            f"| {row['other']} | {row['real_use_covered']} | {row['real_use_recall']:.2%} | {row['false_positives_in_comments_strings']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs="+", type=Path)
    parser.add_argument("--misses", action="store_true", help="list every uncovered real use")
    parser.add_argument("--table", action="store_true", help="print the Markdown table instead of JSON")
    parser.add_argument("--jobs", type=int, default=None)
    args = parser.parse_args(argv)
    for tree in args.trees:
        if not tree.is_dir():
            print(f"recall.py: {tree}: not a folder; pass the root of a source tree", file=sys.stderr)
            return 2
    rows = [measure(tree.resolve(), args.jobs, args.misses) for tree in args.trees]
    if args.table:
        print(table(rows))
    else:
        print(json.dumps({"benchmark": "recall", "trees": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
