"""What every inventory scanner shares: the source file, the scanner interface, finding construction.

A scanner claims files by suffix or name, declares a cheap byte pre-filter (a file
with no CUDA token is counted as scanned and never parsed), and turns one file
into findings. It raises `ScanSkipped` when it cannot read the file, so the file
is reported as skipped with the reason instead of silently dropped.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache

from accelport import knowledge
from accelport.findings import BackendStatus, Finding, Location

SNIPPET_LIMIT = 200


class ScanSkipped(Exception):
    """The file could not be scanned; the message is the reason shown to the user."""


@dataclass
class SourceFile:
    """One file to scan: its bytes, the path shown in reports, and lazily decoded text."""

    display: str
    data: bytes
    # The Python scanner leaves its parse here (possibly partial: statements without CUDA
    # tokens blanked, positions kept), so migrate rewrites from the same parse.
    tree: object | None = field(default=None, repr=False)
    _text: str | None = field(default=None, repr=False)
    _lines: list[str] | None = field(default=None, repr=False)
    # Parts a scanner could not read while the rest of the file was scanned (a wheel's
    # member): (part name, reason), reported as skipped `FILE!PART`.
    skipped_parts: list[tuple[str, str]] = field(default_factory=list, repr=False)
    # At most this many findings are kept for the file (None: all). Beyond it, `admit` counts
    # them per rule and keeps the first of each, for one summary finding per rule.
    finding_limit: int | None = field(default=None, repr=False)
    admitted: int = field(default=0, repr=False)
    dropped: dict[str, tuple[int, Finding]] = field(default_factory=dict, repr=False)

    def admit(self, finding: Finding) -> bool:
        """Whether to keep `finding`: memory stays bounded on a file with millions of hits."""
        if self.finding_limit is None or self.admitted < self.finding_limit:
            self.admitted += 1
            return True
        count, first = self.dropped.get(finding.rule_id, (0, finding))
        self.dropped[finding.rule_id] = (count + 1, first)
        return False

    @property
    def text(self) -> str:
        """The file as UTF-8 text (BOM stripped); raises ScanSkipped when it is not UTF-8."""
        if self._text is None:
            try:
                text = self.data.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ScanSkipped(f"not UTF-8 text (invalid byte at offset {exc.start})") from None
            self._text = text[1:] if text.startswith("\ufeff") else text
        return self._text

    @property
    def lines(self) -> list[str]:
        if self._lines is None:
            self._lines = self.text.splitlines()
        return self._lines

    def snippet(self, line: int) -> str:
        """The stripped source line (1-based), cut to a readable length."""
        lines = self.lines
        if not 1 <= line <= len(lines):
            return ""
        text = lines[line - 1].strip()
        return text if len(text) <= SNIPPET_LIMIT else text[: SNIPPET_LIMIT - 1] + "…"


class FileScanner(ABC):
    """Turns one kind of file into findings. Subclasses set the class attributes."""

    name: str = ""
    suffixes: tuple[str, ...] = ()  # lower-case, with the dot: (".py",)
    filenames: tuple[str, ...] = ()  # exact names: ("CMakeLists.txt",)
    filename_patterns: tuple[str, ...] = ()  # regexes on the file name: (r"requirements.*\.txt",)
    prefilter: re.Pattern[bytes] | None = None  # no match: scanned, nothing to report
    binary: bool = False  # reads bytes; skips the text and NUL checks

    def wants(self, data: bytes) -> bool:
        """Cheap check on raw bytes: does this file contain anything worth parsing?"""
        return self.prefilter is None or self.prefilter.search(data) is not None

    @abstractmethod
    def scan(self, source: SourceFile) -> list[Finding]:
        """Findings for one file; raise ScanSkipped(reason) when the file cannot be understood."""


def claims(filename: str, suffixes: tuple[str, ...], filenames: tuple[str, ...], patterns: tuple[str, ...]) -> bool:
    """Is a file of this name claimed by a scanner with these suffixes, exact names and name regexes?"""
    if filename in filenames or filename.lower().endswith(suffixes):
        return True
    return bool(patterns) and any(p.fullmatch(filename) for p in _compiled(patterns))


@cache
def _compiled(patterns: tuple[str, ...]) -> list[re.Pattern[str]]:
    return [re.compile(p) for p in patterns]


# --------------------------------------------------------------------------- findings


def backend_statuses(
    *,
    cuda_like: BackendStatus = BackendStatus.OK,
    others: BackendStatus = BackendStatus.PORTABLE,
    overrides: Mapping[str, str | BackendStatus] | None = None,
) -> dict[str, BackendStatus]:
    """Status per vendor: vendors whose torch reuses torch.cuda get `cuda_like`, the rest `others`.

    `overrides` (vendor key -> status) come from the knowledge catalogue entry.
    """
    statuses = {}
    for key, profile in knowledge.vendors().items():
        if key == "cuda":
            statuses[key] = BackendStatus.OK
        elif profile.reuses_torch_cuda:
            statuses[key] = cuda_like
        else:
            statuses[key] = others
    for key, value in (overrides or {}).items():
        if key in statuses:
            statuses[key] = BackendStatus(value)
    return statuses


def make_finding(
    rule_id: str,
    *,
    symbol: str,
    location: Location,
    snippet: str = "",
    message: str | None = None,
    replacement: str | None = None,
    backends: Mapping[str, BackendStatus] | None = None,
    autofix: bool | None = None,
    effort: str | None = None,
) -> Finding:
    """A finding whose category, family, effort, route and autofix come from its rule.

    `effort` and `autofix` may be narrowed per finding (a CUDA-only package with a
    known drop-in is cheaper than one without).
    """
    rule = knowledge.rules()[rule_id]
    from accelport.findings import Effort

    return Finding(
        rule_id=rule_id,
        category=rule.category,
        family=rule.family,
        symbol=symbol,
        message=message or rule.summary,
        effort=Effort(effort) if effort else rule.effort,
        route=rule.route,
        location=location,
        backends=backends if backends is not None else backend_statuses(),
        replacement=replacement,
        snippet=snippet,
        autofix=rule.autofix if autofix is None else autofix,
    )
