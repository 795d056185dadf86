"""C/C++/CUDA scanner: tree-sitter's CUDA grammar decides what is code, the CUDA API catalogue classifies it.

One parse per file. Identifiers are found through a byte-level word index and
confirmed against the syntax tree, so a CUDA name inside a comment, a string or
an `#include` path is never reported as a call. Kernels, launches, inline PTX,
registrations and the warp-size hazards come from tree queries.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import replace

from accelport import knowledge
from accelport.findings import Finding, Location
from accelport.inventory.base import FileScanner, ScanSkipped, SourceFile, make_finding
from accelport.inventory.cuda_api import Catalogue, catalogue
from accelport.inventory.cxx.api import _ApiUses, rule_names
from accelport.inventory.cxx.kernels import (
    KERNEL_RULE,
    LAUNCH_RULE,
    MAX_LISTED_SITES,
    DeviceFunction,
    _KernelChecks,
    link_kernel_launches,
)
from accelport.inventory.cxx.syntax import (
    _CONDITION_DIRECTIVES,
    _WORD,
    MAX_BRANCH_VARIANTS,
    _branch_variants,
    _code_mask,
    _conditionals,
    _finding_key,
    _macro_names,
    _masked,
    _parse,
    _Positions,
    _solid,
    kernel_name,
)
from accelport.inventory.cxx.wrappers import (
    WRAPPER_RULE,
    Wrapper,
    _WrapperChecks,
    link_wrappers,
)

__all__ = [
    "KERNEL_RULE",
    "LAUNCH_RULE",
    "MAX_BRANCH_VARIANTS",
    "MAX_ERROR_SHARE",
    "MAX_LISTED_SITES",
    "WRAPPER_RULE",
    "CxxScanner",
    "DeviceFunction",
    "Wrapper",
    "kernel_name",
    "link_kernel_launches",
    "link_wrappers",
]

# A file this broken is not C/C++/CUDA (or not parseable without its macros).
MAX_ERROR_SHARE = 0.5


class CxxScanner(FileScanner):
    """C, C++ and CUDA sources and headers."""

    name = "cxx"
    suffixes = (".cu", ".cuh", ".c", ".cc", ".cpp", ".cxx", ".c++", ".h", ".hh", ".hpp", ".hxx", ".inl", ".ipp", ".tcc", ".cu.inc")

    def wants(self, data: bytes) -> bool:
        return prefilter().search(data) is not None

    def scan(self, source: SourceFile) -> list[Finding]:
        return _FileScan(source, catalogue()).run()


@knowledge.derived_cache
def prefilter() -> re.Pattern[bytes]:
    """The byte pre-filter: the scanner's own patterns (rules/cxx.toml), every API family's words, every site symbol.

    Shipped and site families are looked for alike: their words come from the catalogue.
    """
    patterns = [pattern.encode() for pattern in knowledge.read_toml("rules/cxx.toml")["prefilter"]["patterns"]]
    words = [re.escape(word.encode()) for word in sorted(catalogue().prefilter_words)]
    return re.compile(b"|".join([*patterns, *words]))


class _FileScan(_ApiUses, _KernelChecks, _WrapperChecks):
    """The state of scanning one file."""

    def __init__(self, source: SourceFile, cat: Catalogue, data: bytes | None = None) -> None:
        self.source = source
        # `data` is a same-length variant of the file (inactive #if branches blanked).
        self.data = source.text.encode("utf-8") if data is None else data
        self.cat = cat
        self.names = rule_names()
        self.pos = _Positions(self.data)
        self.findings: list[Finding] = []
        self.reported_spans: set[tuple[int, str]] = set()
        self.type_uses: Counter[str] = Counter()
        self.first_type_finding: dict[str, int] = {}
        self.cuda_source = source.display.lower().endswith((".cu", ".cuh"))
        self.spans: list[tuple[int, int]] = []  # byte span of each finding, in step with `findings`
        # Functions and macros here that call a CUDA library: name -> Wrapper (see `_wrappers`).
        self.wrappers: dict[str, Wrapper] = {}
        self._wrapper_seen = 0  # findings `_wrappers` has looked at

    # ------------------------------------------------------------------ helpers

    def location(self, start: int, end: int) -> Location:
        line, column = self.pos.at(start)
        end_line, end_column = self.pos.at(end)
        return Location(self.source.display, line, column, end_line, end_column)

    def add(self, rule_id: str, node, symbol: str, **kwargs) -> Finding:
        """A finding at `node` (a tree-sitter node, or a (start, end) byte span)."""
        start, end = node if isinstance(node, tuple) else (node.start_byte, node.end_byte)
        location = self.location(start, end)
        family = kwargs.pop("family", None)
        finding = make_finding(rule_id, symbol=symbol, location=location, snippet=self.source.snippet(location.line), **kwargs)
        if family and family != finding.family:
            finding = replace(finding, family=family)
        if self.source.admit(finding):
            self.findings.append(finding)
            self.spans.append((start, end))
        return finding

    # ------------------------------------------------------------------ the scan

    def run(self) -> list[Finding]:
        root, captures = _parse(self.data)
        share = self._error_share(captures.get("error", []))
        if share > MAX_ERROR_SHARE:
            # Often an #if/#else whose branches each open a brace the other closes:
            # scan each branch choice on its own rather than skip the file.
            findings = self._scan_branch_variants(root)
            if findings is not None:
                return findings
            raise ScanSkipped(
                f"not parseable as C/C++/CUDA: syntax errors cover {share:.0%} of the file; "
                "check that it is C/C++ source, or exclude it from the scan"
            )
        return self._scan(root, captures)

    def _scan_branch_variants(self, root) -> list[Finding] | None:
        """Findings from every way of taking the file's #if branches, merged; None if none parses."""
        mask = _code_mask(root)
        groups, directives = _conditionals(self.data, mask)
        if not groups:
            return None
        merged: dict[tuple, Finding] = {}
        for variant in _branch_variants(self.data, groups, directives):
            sub = _FileScan(self.source, self.cat, variant)
            sub_root, sub_captures = _parse(variant)
            if sub._error_share(sub_captures.get("error", []), kept_only=True) > MAX_ERROR_SHARE:
                return None  # one branch choice is not C/C++ either: the file is skipped, not half-read
            for finding in sub._scan(sub_root, sub_captures):
                merged.setdefault(_finding_key(finding), finding)
        # The directives were blanked in every variant: their conditions are looked at here.
        for start, end, name in directives:
            if name not in _CONDITION_DIRECTIVES:
                continue
            for match in _WORD.finditer(self.data, start, end):
                word = match.group().decode("ascii")
                if _masked(mask, match.start()):
                    continue
                if word in self.names.arch_guards:
                    finding = self.add("AP5009", match.span(), word)
                    merged.setdefault(_finding_key(finding), finding)
                elif (entry := self.cat.lookup(word)) is not None and entry.family.wrapped:
                    # `#if CUDNN_FRONTEND_MAJOR_VERSION > 1`: a library version test
                    count = len(self.findings)
                    self._api(entry, match.span(), word, call=False)
                    for finding in self.findings[count:]:
                        merged.setdefault(_finding_key(finding), finding)
        return sorted(merged.values(), key=Finding.sort_key)

    def _scan(self, root, captures) -> list[Finding]:
        self.device_functions = self._device_functions(captures.get("function", []))
        launches = self._launches(captures.get("launch", []))
        launches.update(self._macro_launches(captures.get("macro_body", []), _macro_names(captures)))
        self._kernels(launches)
        self._identifiers(root, captures.get("macro_body", []))
        self._includes(captures.get("include", []))
        self._asm(captures.get("asm", []))
        self._lane_arithmetic(captures.get("binary", []))
        self._fp64(captures.get("primitive", []))
        self._warp_size_constants(captures)
        self._launch_bounds(captures.get("launch_bounds", []))
        self._warp_loops(captures.get("for_loop", []))
        self._registrations(captures.get("call", []))
        self._finish_type_counts()
        # Wrappers of wrappers (`#define cublasCheck(s) cublasCheck_(s, __FILE__, __LINE__)`): a few rounds.
        for _ in range(3):
            if not self._wrappers(captures):
                break
            self._wrapper_uses(root, captures)
        return sorted(self.findings, key=Finding.sort_key)

    def _error_share(self, errors, *, kept_only: bool = False) -> float:
        """The share of the file inside syntax errors; `kept_only`: of its non-blank bytes (for a variant)."""
        if not errors or not self.data:
            return 0.0
        spans = sorted((e.start_byte, e.end_byte) for e in errors)
        covered = 0
        reach = -1
        for start, end in spans:  # union of (possibly nested) error spans
            if end <= reach:
                continue
            start = max(start, reach)
            covered += _solid(self.data[start:end]) if kept_only else end - start
            reach = end
        total = _solid(self.data) if kept_only else len(self.data)
        return covered / total if total else 0.0
