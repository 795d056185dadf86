"""What every inventory scanner shares: the scanner interface and finding construction (the source file itself
lives in `accelport.source.files`, shared with migrate).

A scanner claims files by suffix or name, declares a cheap byte pre-filter (a file
with no CUDA token is counted as scanned and never parsed), and turns one file
into findings. It raises `ScanSkipped` when it cannot read the file, so the file
is reported as skipped with the reason instead of silently dropped.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from functools import cache

from accelport import knowledge
from accelport.findings import BackendStatus, Finding, Location

# A scanner's input and its way to refuse a file are part of the scanner interface.
from accelport.source.files import ScanSkipped, SourceFile  # noqa: F401  (SourceFile also in signatures here)


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
