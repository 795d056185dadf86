"""What a migration did: per-file changes (rewritten, marked, added, removed) and the run's summary."""

from __future__ import annotations

import difflib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from accelport import __version__
from accelport.findings import SkippedFile
from accelport.textsafe import diff_path

CHANGES_SCHEMA = "accelport-migrate-changes-1"

# What happened at one place.
REWRITTEN = "rewritten"  # a finding rewritten into portable code
MARKED = "marked"  # a finding left for manual work, with an inline marker
NOT_REWRITTEN = "not-rewritten"  # a finding migrate would fix, in a form it could not; marked
ADDED = "added"  # an import or the module's device definition the rewrites need
REMOVED = "removed"  # an import the rewrites left unused


@dataclass(frozen=True, slots=True)
class Change:
    """One change in one file. `line` is the line in the original file."""

    path: str
    line: int
    action: str
    rule_id: str | None
    symbol: str
    before: str
    after: str
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "line": self.line,
            "action": self.action,
            "rule_id": self.rule_id,
            "symbol": self.symbol,
            "before": self.before,
            "after": self.after,
            "note": self.note,
        }


@dataclass
class FileMigration:
    """One file with findings: its text before and after, and every change made."""

    path: str
    original: str
    migrated: str
    changes: list[Change] = field(default_factory=list)
    error: str | None = None  # set when the file was left alone, with the reason
    bom: bool = False
    disk_path: str | None = None
    would_change: bool | None = None  # kept when the texts are dropped (--check needs no text)
    helper_path: str | None = None  # the generated helper module the migrated text imports
    creates: bool = False  # a new file (the helper module): nothing on disk yet

    @property
    def changed(self) -> bool:
        if self.error is not None:
            return False
        return self.would_change if self.would_change is not None else self.migrated != self.original

    def without_text(self) -> FileMigration:
        """The same outcome without the file's text (cheaper to ship between processes)."""
        return FileMigration(
            self.path, "", "", self.changes, self.error, self.bom, self.disk_path, self.changed, self.helper_path, self.creates
        )

    def diff(self) -> str:
        if not self.changed:
            return ""
        lines = difflib.unified_diff(
            self.original.splitlines(keepends=True),
            self.migrated.splitlines(keepends=True),
            fromfile=diff_path(f"a/{self.path}"),
            tofile=diff_path(f"b/{self.path}"),
        )
        out = []
        for line in lines:
            out.append(line if line.endswith(("\n", "\r")) else line + "\n\\ No newline at end of file\n")
        return "".join(out)

    def counts(self) -> Counter[str]:
        return Counter(c.action for c in self.changes)


@dataclass(frozen=True, slots=True)
class NotPython:
    """A file with findings that is not Python (C++/CUDA, build files, manifests): route-B work, not rewritten."""

    path: str
    findings: int

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "findings": self.findings}


@dataclass
class MigrationResult:
    """Everything one `migrate` run did or would do."""

    roots: list[str]
    files: list[FileMigration]
    files_scanned: int
    skipped: list[SkippedFile]
    target: str | None = None
    select: tuple[str, ...] = ()
    not_python: list[NotPython] = field(default_factory=list)
    stale_temp: list[str] = field(default_factory=list)  # temporary files a killed --write left behind

    @property
    def changed_files(self) -> list[FileMigration]:
        return [f for f in self.files if f.changed]

    @property
    def failed_files(self) -> list[FileMigration]:
        return [f for f in self.files if f.error is not None]

    @property
    def changes(self) -> list[Change]:
        return [c for f in self.files if f.error is None for c in f.changes]

    def summary(self) -> dict[str, Any]:
        actions = Counter(c.action for c in self.changes)
        return {
            "files_scanned": self.files_scanned,
            "files_with_findings": len(self.files),
            "files_changed": len(self.changed_files),
            "files_left_alone": len(self.failed_files) + len(self.skipped),
            "rewritten": actions.get(REWRITTEN, 0),
            "marked": actions.get(MARKED, 0) + actions.get(NOT_REWRITTEN, 0),
            "not_rewritten": actions.get(NOT_REWRITTEN, 0),
            "added": actions.get(ADDED, 0),
            "removed": actions.get(REMOVED, 0),
            "not_python_files": len(self.not_python),
            "by_rule": dict(sorted(Counter(c.rule_id for c in self.changes if c.rule_id).items())),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": CHANGES_SCHEMA,
            "tool": {"name": "accelport", "version": __version__},
            "roots": list(self.roots),
            "target": self.target,
            "select": list(self.select),
            "summary": self.summary(),
            "files": [
                {
                    "path": f.path,
                    "changed": f.changed,
                    "error": f.error,
                    "changes": [c.to_dict() for c in f.changes] if f.error is None else [],
                }
                for f in self.files
            ],
            "skipped": [s.to_dict() for s in self.skipped],
            "not_python": [n.to_dict() for n in self.not_python],
        }
