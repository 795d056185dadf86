"""The Python scanner: one `ast` walk per file (and per notebook cell), rules registered by node kind."""

from __future__ import annotations

import ast
import bisect
import json
import re
import warnings

from accelport import knowledge
from accelport.findings import Finding
from accelport.inventory.base import FileScanner, ScanSkipped, SourceFile
from accelport.inventory.python.context import PyContext
from accelport.inventory.python.rules import FINALIZERS, REGISTRY, load
from accelport.source import chunks, fastfind
from accelport.source.markers import GENERATED_HEADER, MARKER_WORD, acknowledge

load()

# Cheap anchors: one pass of a short alternation over the raw bytes. Every Python
# finding contains one of them, or (through an import line) the name of a CUDA-only
# package: `wants` and `code_token_lines` look for those on import lines.
_STATIC_ANCHORS = (
    b"cud", b"CUD", b"CUBLAS", b"nccl", b"NCCL", b"nvtx", b"NVIDIA", b"NVTE",
    b"DataParallel", b"GradScaler", b"pin_memory", b"cpp_extension", b"ProfilerActivity",
)  # fmt: skip
_WORD = re.compile(rb"[A-Za-z0-9_]+")
_WORD_BYTES = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_"
_ENV_PREFIXES = (
    b"CUDA", b"NCCL", b"CUDNN", b"CUBLAS", b"CUBLASLT", b"CUFFT", b"NVIDIA", b"NVTE",
    b"PYTORCH_CUDA", b"TORCH_CUDA", b"TORCH_NCCL", b"TORCH_CUDNN",
)  # fmt: skip
_ENV_WORD = re.compile(rb"(?:" + b"|".join(_ENV_PREFIXES) + rb")_[A-Z0-9_]+")
# Whole words that can start a finding. Others containing an anchor (cuda_graphs,
# cuda_cluster_v2) are identifiers or path pieces no rule reports.
_KEEP_WORDS = frozenset(
    {
        b"cuda",
        b"CUDA",
        b"cudnn",
        b"is_cuda",
        b"use_cuda",
        b"nccl",
        b"NCCL",
        b"is_nccl_available",
        b"nvtx",
        b"emit_nvtx",
        b"CUDA_HOME",
        b"CUDAExtension",
        b"CUDAGraph",
        b"DataParallel",
        b"DistributedDataParallel",
        b"GradScaler",
        b"pin_memory",
        b"cpp_extension",
        b"ProfilerActivity",
    }
)
_KEEP_SORTED = tuple(sorted(_KEEP_WORDS))
_IMPORT_LINE = re.compile(rb"[ \t]*(?:import|from)[ \t]")


@knowledge.derived_cache
def _package_words() -> frozenset[bytes]:
    from accelport import knowledge

    return frozenset(name.split(".")[0].encode() for name in knowledge.packages())


@knowledge.derived_cache
def _package_list() -> tuple[bytes, ...]:
    return tuple(sorted(_package_words()))


# One search for every anchor and for `import` (the last needle): see fastfind.
_NEEDLES = (*_STATIC_ANCHORS, b"import")
_IMPORT = len(_STATIC_ANCHORS)
_STOP_AT_ANCHOR = (1 << _IMPORT) - 1


def _names_package(data: bytes, at: int) -> bool:
    """Is the line holding this offset an import statement naming a CUDA-only package?"""
    line_start = data.rfind(b"\n", 0, at) + 1
    line_end = data.find(b"\n", at)
    text = data[line_start : line_end if line_end >= 0 else len(data)]
    return _IMPORT_LINE.match(text) is not None and not _package_words().isdisjoint(_WORD.findall(text))


@knowledge.derived_cache
def _prefilter_needles() -> tuple[bytes, ...] | None:
    """The anchors, then every CUDA-only package name that holds none of them; None if they do not fit one search."""
    names = sorted(w for w in _package_words() if len(w) >= 2 and not any(a in w for a in _STATIC_ANCHORS))
    needles = (*_STATIC_ANCHORS, *names)
    return needles if len(needles) <= fastfind.MAX_NEEDLES else None


def wants(data: bytes) -> bool:
    """Could the file hold a finding? A static anchor, or an import line naming a CUDA-only package.

    Never the helper module migrate generates (it starts with GENERATED_HEADER): that is
    accelport's code, written to work on every device.
    """
    if data.startswith(GENERATED_HEADER):
        return False
    needles = _prefilter_needles() if fastfind.prepare() else None
    if needles is not None:
        # One compiled pass that stops at the first anchor. A package name counts on an
        # import line; one that holds an anchor was stopped at already.
        marks = fastfind.find_all(data, needles, _STOP_AT_ANCHOR)
        if marks and marks[-1] & 31 < _IMPORT:
            return True
        return any(_names_package(data, mark >> 5) for mark in marks)
    # `bytes.find` per word runs far faster than one regex alternation over the file.
    for word in _STATIC_ANCHORS:
        if word in data:
            return True
    at = data.find(b"import")
    while at >= 0:
        if _names_package(data, at):
            return True
        line_end = data.find(b"\n", at)
        if line_end < 0:
            break
        at = data.find(b"import", line_end)
    return False


def code_token_lines(data: bytes, edges: list[int] | chunks.LazyEdges | None = None) -> set[int]:
    """Lines where a CUDA token appears in code: outside comments and triple-quoted strings.

    Conservative by construction: a token is dropped only when it is plainly in a
    `#` comment (no quote before the `#` on its line), inside a triple-quoted
    string (`edges` from `chunks.string_edges`, or a `chunks.LazyEdges` computed only
    if some token needs it; with None no line counts as inside one), or part of a
    longer identifier no rule reports; the AST settles the rest. A CUDA-only package's
    name counts only in an import statement. The compiled helper runs the same loop
    when there is one (`code_token_lines_python` is the reference).
    """
    helper = fastfind.native()
    if helper is not None:
        found = helper.token_lines(
            data, _NEEDLES, _IMPORT, _KEEP_SORTED, _package_list(),
            _ENV_PREFIXES, edges.get() if isinstance(edges, chunks.LazyEdges) else edges,
        )  # fmt: skip
        if found is not fastfind.OVERFLOW:
            return set(found)
    return code_token_lines_python(data, edges)


def code_token_lines_python(data: bytes, edges: list[int] | chunks.LazyEdges | None = None) -> set[int]:
    """The reference for `code_token_lines`."""
    packages = _package_words()
    lines: set[int] = set()
    line = 1
    position = 0
    for mark in fastfind.find_all(data, _NEEDLES):
        start = mark >> 5
        line += data.count(b"\n", position, start)
        position = start
        if line in lines:
            continue
        line_start = data.rfind(b"\n", 0, start) + 1
        if mark & 31 == _IMPORT:
            # Only an import statement that names a CUDA-only package (or torch.cuda) counts.
            line_end = data.find(b"\n", start)
            text = data[line_start : line_end if line_end >= 0 else len(data)]
            if not _IMPORT_LINE.match(text):
                continue
            words = set(_WORD.findall(text))
            if not (words & packages or words & _KEEP_WORDS):
                continue
        else:
            word_start = line_start + len(data[line_start:start].rstrip(_WORD_BYTES))
            word = _WORD.match(data, word_start)
            token = word.group() if word else b""
            if token not in _KEEP_WORDS and not _ENV_WORD.fullmatch(token):
                continue
            if token in (b"cuda", b"CUDA"):
                before = data[word_start - 1 : word_start]
                after = data[word.end() : word.end() + 1]
                if before == b"/" or after == b"/":
                    continue  # a path segment: ckpt/cuda/model.pt
        prefix = data[line_start:start]
        hash_at = prefix.find(b"#")
        if hash_at >= 0 and b'"' not in prefix[:hash_at] and b"'" not in prefix[:hash_at]:
            continue  # in a comment
        if edges is not None and chunks.inside_string(edges.get() if isinstance(edges, chunks.LazyEdges) else edges, start):
            continue  # inside a docstring or other triple-quoted string
        lines.add(line)
    return lines


def _spans(node: ast.stmt, wanted: list[int]) -> bool:
    """Does the statement cover any wanted line?"""
    start = node.lineno
    decorators = getattr(node, "decorator_list", None)
    if decorators:
        start = min(start, *(d.lineno for d in decorators))  # `def` is the node's line; decorators sit above it
    index = bisect.bisect_left(wanted, start)
    return index < len(wanted) and wanted[index] <= (node.end_lineno or node.lineno)


_CHILD_FIELDS: dict[type, tuple[str, ...]] = {}


def walk(ctx: PyContext, tree: ast.AST, wanted: list[int] | None = None) -> None:
    """Pre-order walk in source order, so imports are bound before the code that uses them.

    With `wanted` (sorted line numbers holding CUDA tokens), statements that cover
    none of them are not entered: rules only ever fire on nodes at those lines.
    Imports are always entered, since they bind the names the rest resolves.
    """
    registry = REGISTRY
    parents = ctx.parents
    fields = _CHILD_FIELDS
    AST = ast.AST
    stmt = ast.stmt
    imports = (ast.Import, ast.ImportFrom)
    stack = [tree]
    pop, extend = stack.pop, stack.extend
    while stack:
        node = pop()
        kind = type(node)
        rules = registry.get(kind)
        if rules:
            for rule in rules:
                rule(ctx, node)
        names = fields.get(kind)
        if names is None:
            # `ctx` (Load/Store) children are never inspected; leaving them out saves a third of the walk.
            names = fields[kind] = tuple(f for f in kind._fields if f != "ctx")
        children = []
        for name in names:
            value = getattr(node, name, None)
            if value is None:
                continue
            if type(value) is list:
                for child in value:
                    if not isinstance(child, AST):
                        continue  # names of a `global`, say
                    # Statements sit only in lists (bodies): those covering no wanted line are not entered.
                    if wanted is not None and isinstance(child, stmt) and not isinstance(child, imports) and not _spans(child, wanted):
                        continue
                    parents[id(child)] = node
                    children.append(child)
            elif isinstance(value, AST):
                parents[id(value)] = node
                children.append(value)
        if children:
            children.reverse()
            extend(children)
    for finalize in FINALIZERS:
        finalize(ctx)


def _module_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Imports at module level, also inside top-level if/try/with blocks (optional imports)."""
    found = []
    pending = list(tree.body)
    while pending:
        stmt = pending.pop()
        if isinstance(stmt, ast.Import | ast.ImportFrom):
            found.append(stmt)
        elif isinstance(stmt, ast.If | ast.Try | ast.With):
            pending.extend(stmt.body)
            pending.extend(getattr(stmt, "orelse", []))
            pending.extend(getattr(stmt, "finalbody", []))
            for handler in getattr(stmt, "handlers", []):
                pending.extend(handler.body)
    return found


@knowledge.derived_cache
def _interesting(qualname: str) -> bool:
    """Is this import target a CUDA API, a CUDA-only package, or a call judged by name?"""
    from accelport.inventory.python.rules.calls import RESOLVED_CALLS
    from accelport.source.names import lookup_api, lookup_package

    return qualname in RESOLVED_CALLS or lookup_api(qualname) is not None or lookup_package(qualname) is not None


def _alias_lines(ctx: PyContext, tree: ast.Module, text: str) -> set[int]:
    """Lines that use a name imported from a CUDA API or package (`from torch.cuda.amp import autocast`)."""
    interesting = _interesting
    # Names bound before this text (earlier notebook cells) count as well.
    names = {name for name, qualname in ctx.aliases.items() if "." in qualname and interesting(qualname)}
    for stmt in _module_imports(tree):
        for alias in stmt.names:
            if isinstance(stmt, ast.ImportFrom):
                if stmt.level or not stmt.module or alias.name == "*":
                    continue
                qualname = f"{stmt.module}.{alias.name}"
            else:
                qualname = alias.name
            bound = alias.asname or (alias.name if isinstance(stmt, ast.ImportFrom) else alias.name.split(".")[0])
            if interesting(qualname):
                names.add(bound)
    if not names:
        return set()
    # Bare alternation (no leading \b) lets the regex engine skip ahead by first letter;
    # word edges are checked by hand.
    pattern = re.compile("|".join(re.escape(n) for n in sorted(names, key=len, reverse=True)))
    found = set()
    line, position = 1, 0
    for match in pattern.finditer(text):
        start, end = match.span()
        if start and (text[start - 1].isalnum() or text[start - 1] in "_."):
            continue  # inside a longer name, or an attribute of something else (`x.autocast`)
        if end < len(text) and (text[end].isalnum() or text[end] == "_"):
            continue
        line += text.count("\n", position, start)
        position = start
        found.add(line)
    return found


_INDEX_MOVE = re.compile(r"\.to\(\s*(?:self\.)?\w*(?:rank|gpu|gpu_id|device_id|device_index|ordinal)\s*[,)]", re.I)


def _index_move_lines(text: str) -> set[int]:
    found = set()
    line, position = 1, 0
    for match in _INDEX_MOVE.finditer(text):
        line += text.count("\n", position, match.start())
        position = match.start()
        found.add(line)
    return found


def _parse(text: str, display: str, cell: int | None) -> ast.Module:
    with warnings.catch_warnings():
        # Invalid escapes and the like are the user's business (3.11 warns with DeprecationWarning, 3.12+ SyntaxWarning).
        warnings.simplefilter("ignore", SyntaxWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            return ast.parse(text, filename=display)
        except SyntaxError as exc:
            where = f"cell {cell}, line {exc.lineno}" if cell is not None else f"line {exc.lineno}"
            raise ScanSkipped(f"does not parse as Python ({where}: {exc.msg}); fix the syntax or exclude the file") from None
        except (ValueError, MemoryError) as exc:
            raise ScanSkipped(f"does not parse as Python ({exc})") from None


def _parse_needed(
    ctx: PyContext, text: str, lines: list[str], wanted: set[int], starts: list[int] | None
) -> tuple[ast.Module, set[int]] | None:
    """Parse only the top-level statements holding wanted lines, plus the imports; None to parse it all."""
    if starts is None:
        return None  # statement starts could not be told apart safely
    spans, keep = chunks.select(lines, wanted, starts)
    if all(keep):
        return None
    for _ in range(2):
        try:
            tree = _parse(chunks.blanked(lines, spans, keep), ctx.source.display, None)
        except ScanSkipped:
            return None  # statement starts guessed wrong: the whole file settles it
        extra = _alias_lines(ctx, tree, text)
        ordered = sorted(extra)
        missing = [
            i
            for i, (start, end) in enumerate(spans)
            if not keep[i] and (j := bisect.bisect_right(ordered, start)) < len(ordered) and ordered[j] <= end
        ]
        if not missing:
            return tree, extra
        for index in missing:
            keep[index] = True
    return None


def scan_python_text(
    source: SourceFile,
    text: str,
    cell: int | None = None,
    wanted: set[int] | None = None,
    aliases: dict[str, str] | None = None,
    data: bytes | None = None,
    edges: chunks.LazyEdges | None = None,
    parse_also: set[int] | None = None,
    nested: set[int] | None = None,
) -> list[Finding]:
    """Findings for one piece of Python source (a file, or a notebook cell).

    With `wanted` (lines holding CUDA tokens) only the statements that cover them are
    parsed and walked; the parse is left in `source.tree` (partial: other statements are
    blanked, positions kept). `parse_also` adds lines whose statements are parsed but not
    walked (migrate checks that rewritten statements parse; a finding needs a CUDA token
    or a CUDA alias, so statements without either hold none). `aliases` carries import
    bindings between notebook cells, which share one namespace; it is updated with this
    text's imports. `nested`: lines of indented imports to walk as well (`import_lines`;
    worked out from the text when not given).
    """
    lines = chunks.split_lines(text)
    ctx = PyContext(source, lines, cell)
    if aliases is not None:
        ctx.aliases = aliases
    partial = None
    if wanted and ".to(" in text:
        # `x.to(local_rank)` holds no CUDA token, yet an int device is an accelerator index: in a file
        # that uses CUDA, such lines are scanned too (rules/calls.py decides).
        wanted = wanted | _index_move_lines(text)
    if wanted is not None and cell is None:
        starts = chunks.statement_starts(data if data is not None else text.encode("utf-8", "surrogatepass"), edges)
        partial = _parse_needed(ctx, text, lines, wanted | parse_also if parse_also else wanted, starts)
    if partial is not None:
        tree, extra = partial
    else:
        tree = _parse(text, source.display, cell)
        extra = _alias_lines(ctx, tree, text) if wanted is not None else set()
    if cell is None:
        source.tree = tree  # for callers that rewrite what was found (migrate); may be partial
    if wanted is not None:
        # Imports inside functions and `try:` blocks (`import torch` in a method, as DeepSpeed's
        # op builders do) bind names the CUDA lines use: the statements holding them are entered too.
        extra |= nested if nested is not None else import_lines(text.encode("utf-8", "surrogatepass"))[1]
    walk(ctx, tree, sorted(wanted | extra) if wanted is not None else None)
    return ctx.findings


# Lines with CUDA tokens parsed and walked at once in a file with more of them than it keeps findings.
WINDOW_LINES = 5000


def _window_text(lines: list[str], bounds: list[int], keep: list[int]) -> str:
    """The file with only the spans `keep` (sorted indices) left, every other line empty: positions stay."""
    pieces = []
    line = 0
    for index in keep:
        start, end = bounds[index], bounds[index + 1]
        pieces.append("\n" * (start - line))
        pieces.append("\n".join(lines[start:end]) + "\n")
        line = end
    return "".join(pieces)


def scan_in_windows(source: SourceFile, wanted: list[int], size: int, edges: chunks.LazyEdges) -> list[Finding]:
    """A file with more lines holding CUDA tokens than it keeps findings, parsed and walked `size` of those lines at a time.

    Each window parses its own top-level statements and the file's imports (walked again
    with every window, their findings reported once), so memory follows the window, not
    the file's size; a statement larger than a window is still parsed whole. Every window
    is walked: the findings beyond the file's limit are counted (`SourceFile.admit`), so
    its summaries say exactly how many more there are. Where statement starts cannot be
    told apart safely, the file is scanned whole.
    """
    text = source.text
    starts = chunks.statement_starts(source.data, edges)
    if starts is None:
        return scan_python_text(source, text, wanted=set(wanted), data=source.data, edges=edges)
    lines = chunks.split_lines(text)
    # Span i is lines bounds[i] to bounds[i + 1] (0-based, half-open): one top-level statement.
    bounds = [0, *starts] if not starts or starts[0] != 0 else list(starts)
    bounds.append(len(lines))
    imports = [i for i in range(len(bounds) - 1) if bounds[i] < bounds[i + 1] and chunks._is_import_chunk(lines, bounds[i], bounds[i + 1])]
    import_lines = {line for i in imports for line in range(bounds[i] + 1, bounds[i + 1] + 1)}
    reported: set[tuple[str, int, int]] = set()  # findings on import lines, walked with every window
    findings: list[Finding] = []
    aliased: list[int] | None = None  # lines using a CUDA name bound by an import: the same imports in every window
    first_span = begin = 0
    while begin < len(wanted):
        # A window ends with a whole statement: every wanted line of its spans belongs to it.
        last_line = wanted[begin + size - 1] if begin + size < len(wanted) else len(lines)
        last_span = bisect.bisect_right(bounds, last_line - 1, hi=len(bounds) - 1) - 1  # the span holding that line
        lo, hi = bounds[first_span] + 1, bounds[last_span + 1]  # 1-based lines this window answers for
        end = bisect.bisect_right(wanted, hi)
        part, begin = wanted[begin:end], end
        keep = sorted({*imports, *(i for i in range(first_span, last_span + 1) if _holds(bounds, i, part))})
        ctx = PyContext(source, lines)
        ctx._seen = set(reported)
        try:
            tree = _parse(_window_text(lines, bounds, keep), source.display, None)
            if aliased is None:
                aliased = sorted(_alias_lines(ctx, tree, text))
            extra = aliased[bisect.bisect_left(aliased, lo) : bisect.bisect_right(aliased, hi)]
            more = sorted(set(keep) | {i for i in range(first_span, last_span + 1) if _holds(bounds, i, extra)})
            if more != keep:
                tree = _parse(_window_text(lines, bounds, more), source.display, None)
        except ScanSkipped:  # statement starts guessed wrong: the whole file settles it, counted afresh
            source.admitted, source.dropped = 0, {}
            return scan_python_text(source, text, wanted=set(wanted), data=source.data, edges=edges)
        walk(ctx, tree, sorted({*part, *extra}))
        findings += ctx.findings
        reported |= {key for key in ctx._seen if key[1] in import_lines}
        first_span = last_span + 1
    return findings


def _holds(bounds: list[int], index: int, ordered: list[int]) -> bool:
    """Whether span `index` holds one of the sorted 1-based lines."""
    at = bisect.bisect_right(ordered, bounds[index])
    return at < len(ordered) and ordered[at] <= bounds[index + 1]


_EXTENSION_MODULE = re.compile(rb"[ \t]*(?:import|from)[ \t]+\w*(?:cuda|cudnn|nccl|nvtx)")
_IMPORT_START = (b"import ", b"import\t", b"from ", b"from\t")


@knowledge.derived_cache
def _package_names() -> frozenset[bytes]:
    return frozenset(_package_words()) | {b"torch"}


def import_lines(data: bytes) -> tuple[set[int], set[int]]:
    """(lines importing a top-level module named after CUDA, lines of indented imports that bind torch or a
    CUDA-only package).

    The first are a project's compiled CUDA extensions (`import fused_layer_norm_cuda`): no
    keyword the line filter keeps. The second are imports inside a function or `try:` block
    (`import torch` in a method, as DeepSpeed's op builders do): the statements holding them
    are walked, since they bind the names the CUDA lines use. One pass: `bytes.find` for each
    `import` (a `from` line holds one too).
    """
    extensions: set[int] = set()
    nested: set[int] = set()
    line, position = 1, 0
    at = data.find(b"import")
    while at >= 0:
        line_start = data.rfind(b"\n", 0, at) + 1
        line_end = data.find(b"\n", at)
        if line_end < 0:
            line_end = len(data)
        text = data[line_start:line_end]
        code = text.lstrip(b" \t")
        if code.startswith(_IMPORT_START):
            line += data.count(b"\n", position, line_start)
            position = line_start
            if _EXTENSION_MODULE.match(text):
                extensions.add(line)
            if len(code) < len(text) and not _package_names().isdisjoint(_WORD.findall(code)):
                nested.add(line)
        at = data.find(b"import", line_end)
    return extensions, nested


class PythonScanner(FileScanner):
    name = "python"
    suffixes = (".py", ".pyi", ".pyw")

    def __init__(self) -> None:
        fastfind.prepare()  # built or loaded now, before any worker process is forked

    def wants(self, data: bytes) -> bool:
        return wants(data)

    def scan(self, source: SourceFile) -> list[Finding]:
        data = source.data
        if data.startswith(GENERATED_HEADER):
            return []  # the helper module migrate writes
        edges = chunks.LazyEdges(data)
        wanted = code_token_lines(data, edges)
        extensions, nested = import_lines(data)
        wanted |= extensions
        if not wanted:
            return []  # every CUDA token sits in a comment or docstring
        limit = source.finding_limit
        if limit is None or len(wanted) <= limit:
            findings = scan_python_text(source, source.text, wanted=wanted, data=data, edges=edges, nested=nested)
        else:  # a huge file: windows of statements (nested imports are not followed there)
            findings = scan_in_windows(source, sorted(wanted), max(limit, WINDOW_LINES), edges)
        if findings and MARKER_WORD in source.data:
            findings = acknowledge(findings, source.lines)
        return findings


# IPython-only lines: line magics, shell escapes, help queries (`obj?`, `?obj`).
_MAGIC = re.compile(r"^\s*[%!?]|\?\s*$")


class NotebookScanner(FileScanner):
    """Jupyter notebooks, cell by cell; locations are relative to the cell (1-based cell numbers)."""

    name = "notebook"
    suffixes = (".ipynb",)

    def __init__(self) -> None:
        fastfind.prepare()

    def wants(self, data: bytes) -> bool:
        return wants(data)

    def scan(self, source: SourceFile) -> list[Finding]:
        try:
            notebook = json.loads(source.text)
        except json.JSONDecodeError as exc:
            raise ScanSkipped(f"not a valid notebook (JSON error at line {exc.lineno}: {exc.msg})") from None
        cells = notebook.get("cells") if isinstance(notebook, dict) else None
        if not isinstance(cells, list):
            raise ScanSkipped("not a valid notebook (no cells list); is it an nbformat 4 file?")
        findings: list[Finding] = []
        aliases: dict[str, str] = {}
        for number, cell in enumerate(cells, 1):
            if not isinstance(cell, dict) or cell.get("cell_type") != "code":
                continue
            raw = cell.get("source", "")
            text = "".join(raw) if isinstance(raw, list) else str(raw)
            if text.lstrip().startswith("%%"):
                continue  # a cell magic (%%bash, %%writefile ...): not Python
            # IPython-only lines are not Python: blank them, keeping line numbers.
            text = "\n".join("" if _MAGIC.search(line) else line for line in text.split("\n"))
            encoded = text.encode("utf-8", "surrogatepass")
            wanted = code_token_lines(encoded, chunks.string_edges(encoded))
            try:
                # Every code cell is parsed, if only to bind its imports for later cells.
                findings.extend(scan_python_text(source, text, cell=number, wanted=wanted, aliases=aliases))
            except ScanSkipped:
                if wanted:
                    raise
                # A cell with no CUDA token that is not plain Python (IPython syntax) holds nothing to report.
        return findings
