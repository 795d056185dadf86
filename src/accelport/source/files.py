"""One file read once: its bytes, the path shown to the user, the text decoded on first use, and the parse a
scanner leaves for migrate to rewrite from. Inventory, migrate and run all hold a file as a `SourceFile`."""

from __future__ import annotations

from dataclasses import dataclass, field

from accelport.findings import Finding

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
