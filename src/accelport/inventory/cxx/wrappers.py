"""Project functions and macros that wrap a CUDA library call, and their uses in this file and across the tree."""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass, replace

from accelport.findings import Finding, Location, sorted_findings
from accelport.inventory.cxx.backends import _entry_backends
from accelport.inventory.cxx.syntax import (
    _IDENT_TYPES,
    _WORD,
    _declarator_node,
    _inside_quotes,
    _occurrences,
    _without_comments,
)

WRAPPER_RULE = "AP4190"
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DEFINED = ": port it once and its callers follow"
# Wrapper names followed into other files: not one short lower-case word (`step`, `forward`, `gemm`).
_DISTINCT_NAME = re.compile(r"(?=\w{6,}$)\w*[A-Z0-9_]\w*")
_LEXICAL_NOISE = re.compile(rb'//[^\n]*|/\*.*?(?:\*/|\Z)|"(?:\\.|[^"\\\n])*"|^[ \t]*#[ \t]*include[^\n]*', re.DOTALL | re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Wrapper:
    """A project function or macro that calls a CUDA library: its callers depend on CUDA one level down."""

    name: str
    path: str  # as reports show it
    line: int
    family: str
    symbol: str  # the first CUDA API it calls
    offset: int  # byte offset of its name in its file


class _WrapperChecks:
    """Finding a file's own wrappers and their uses (a part of `_FileScan`)."""

    def _wrappers(self, captures) -> bool:
        """Functions and macros defined here whose body calls a CUDA library (or a wrapper): the project's own
        wrappers. Did this round find new ones?"""
        before = len(self.wrappers)
        definitions = []  # (start, end, name, name node)
        for node in captures.get("function", []):
            name_node = _declarator_node(node.child_by_field_name("declarator"))
            if name_node is not None:
                definitions.append((node.start_byte, node.end_byte, name_node))
        for name_node in captures.get("function_macro_name", []):
            define = name_node.parent
            definitions.append((define.start_byte, define.end_byte, name_node))
        for name_node in captures.get("define_name", []):
            define = name_node.parent
            definitions.append((define.start_byte, define.end_byte, name_node))
        if not definitions:
            return False
        definitions.sort(key=lambda d: (d[0], -d[1]))
        lows = [d[0] for d in definitions]
        seen, self._wrapper_seen = self._wrapper_seen, len(self.findings)  # each round looks at new findings only
        for finding, (start, _end) in zip(self.findings[seen:], self.spans[seen:], strict=True):
            if finding.family not in self.cat.wrapped_families:  # `wrapped = true` in the family's data
                continue
            # The innermost definition holding the call (a method inside a class): the last one
            # starting before it that still holds it.
            holder = None
            for index in range(bisect_right(lows, start) - 1, -1, -1):
                if start < definitions[index][1]:
                    holder = definitions[index][2]
                    break
            if holder is None or self.device_function_at(start) is not None:
                continue  # kernels and device functions are launched or inlined, not wrappers of a host library
            name = holder.text.decode("utf-8", errors="replace").rsplit("::", 1)[-1]
            if name in self.wrappers or name == "main" or not _IDENTIFIER.fullmatch(name):
                continue
            inner = self.wrappers.get(finding.symbol) if finding.rule_id == WRAPPER_RULE else None
            symbol = inner.symbol if inner is not None else finding.symbol
            self.wrappers[name] = Wrapper(name, self.source.display, holder.start_point.row + 1, finding.family, symbol, holder.start_byte)
        return len(self.wrappers) > before

    def _wrapper_uses(self, root, captures) -> None:
        """Every use in this file of a wrapper defined here (other files: `link_wrappers`)."""
        reported = {start for start, _end in self.spans}
        visible = {name: w for name, w in self.wrappers.items() if w.offset not in reported}  # this round's
        if not visible:
            return
        # A line that already names a CUDA API (`cudaCheck(cudaMalloc(...))`) is in the report: the wrapper adds no work.
        busy = {f.location.line for f in self.findings if f.rule_id != WRAPPER_RULE}
        for start, word in _occurrences(self.data, set(visible)):
            if start in reported or (start != visible[word].offset and self.pos.at(start)[0] in busy):
                continue
            node = root.descendant_for_byte_range(start, start + len(word))
            if node is None or node.start_byte != start or node.type not in _IDENT_TYPES:
                continue  # a comment, a string, a macro body (looked at below) or a longer token
            if node.parent is not None and node.parent.type == "field_expression":
                continue  # `obj.name(...)`: another object's member of the same name
            self._wrapper_use(visible[word], (start, start + len(word)))
        for body in captures.get("macro_body", []):
            text = _without_comments(body.text)
            for match in _WORD.finditer(text):
                wrapper = visible.get(match.group().decode("ascii"))
                if wrapper is not None and not _inside_quotes(text, match.start()):
                    self._wrapper_use(wrapper, (body.start_byte + match.start(), body.start_byte + match.end()))

    def _wrapper_use(self, wrapper: Wrapper, span: tuple[int, int]) -> None:
        entry = self.cat.lookup(wrapper.symbol)
        what = f"{entry.family.title if entry is not None else wrapper.family} ({wrapper.symbol})"
        if span[0] == wrapper.offset:
            message = f"`{wrapper.name}` wraps {what}{_DEFINED}"
        else:
            message = f"`{wrapper.name}` wraps {what}, defined at {wrapper.path}:{wrapper.line}"
        backends = _entry_backends(entry) if entry is not None else None
        self.add(WRAPPER_RULE, span, wrapper.name, message=message, backends=backends, family=wrapper.family)


def link_wrappers(findings: list[Finding], files: list[tuple[str, str]]) -> list[Finding]:
    """Uses of each wrapper in the other C/C++/CUDA files of the tree, by name (`files`: (path on disk, display)).

    A wrapper is defined in one file and called from many (`cublasCheck` in a header,
    `attention_forward_cudnn` in a .cpp called from a .cu that includes only its
    declaration). Names that a project could well use for something else (short,
    one lower-case word such as `step`) are not followed across files. The other
    files are read again and looked at lexically: comments, string literals and
    `#include` lines are blanked, member calls (`x.name(`, `p->name(`) skipped.
    """
    wrappers: dict[str, Finding] = {}
    defined_in: dict[bytes, set[str]] = {}  # a name each file defines for itself (a per-file CUDA_CHECK) is its own
    for finding in findings:
        if finding.rule_id == WRAPPER_RULE and finding.message.endswith(_DEFINED) and _DISTINCT_NAME.fullmatch(finding.symbol):
            wrappers.setdefault(finding.symbol, finding)
            defined_in.setdefault(finding.symbol.encode("ascii"), set()).add(finding.location.path)
    if not wrappers:
        return findings
    # Lines already in the report (a direct CUDA API, or this wrapper found by the file's own scan) get nothing more.
    have = {(f.location.path, f.location.line) for f in findings}
    by_bytes = {name.encode("ascii"): definition for name, definition in wrappers.items()}
    names_set = frozenset(by_bytes)
    added = []
    for path, display in files:
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except OSError:
            continue  # reported (or not) by the scan itself
        # The file's own wrappers were followed by its scan: only names defined elsewhere are looked for.
        wanted = {w for w in set(_WORD.findall(data)) & names_set if display not in defined_in[w]}
        if not wanted:
            continue
        code = _LEXICAL_NOISE.sub(lambda m: re.sub(rb"[^\n]", b" ", m.group()), data)
        names = re.compile(rb"(?<![\w.>])(?:" + b"|".join(re.escape(w) for w in sorted(wanted, key=len, reverse=True)) + rb")(?!\w)")
        starts = None
        lines = None
        for match in names.finditer(code):
            definition = by_bytes[match.group()]
            if starts is None:
                starts = [0, *(m.end() for m in re.finditer(rb"\n", code))]
            line = bisect_right(starts, match.start())
            if (display, line) in have:
                continue
            have.add((display, line))
            if lines is None:
                lines = data.decode("utf-8", errors="replace").splitlines()
            name = definition.symbol
            column = match.start() - starts[line - 1] + 1
            where = f"{definition.location.path}:{definition.location.line}"
            text = lines[line - 1].strip() if line <= len(lines) else ""
            added.append(
                replace(
                    definition,
                    location=Location(display, line, column, line, column + len(name)),
                    snippet=text if len(text) <= 200 else text[:199] + "…",
                    message=definition.message[: -len(_DEFINED)] + f", defined at {where}",
                    acknowledged=False,
                )
            )
    return sorted_findings([*findings, *added]) if added else findings
