"""The shared model of inventory, migrate and coverage: Location, Finding, Rule, Report.

A report serialises to versioned JSON described by `schemas/inventory-report.schema.json`.
"""

from __future__ import annotations

import functools
import json
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

SCHEMA_VERSION = "1.0"
SCHEMA_ID = "https://accelport.dev/schemas/inventory-report-1.0.json"


class Category(str, Enum):
    """What kind of CUDA dependency a finding is. The rule ID's first digit is `digit`."""

    FRAMEWORK_API = "framework-api"
    RUNTIME_API = "runtime-api"
    DRIVER_API = "driver-api"
    LIBRARY_CALL = "library-call"
    KERNEL = "kernel"
    BUILD = "build"
    BINARY = "binary"
    DEPENDENCY = "dependency"
    SEMANTIC_HAZARD = "semantic-hazard"

    @property
    def digit(self) -> int:
        return list(Category).index(self) + 1

    @property
    def title(self) -> str:
        return _CATEGORY_TITLES[self]

    @classmethod
    def from_rule_id(cls, rule_id: str) -> Category:
        return list(cls)[int(rule_id[2]) - 1]


_CATEGORY_TITLES = {
    Category.FRAMEWORK_API: "framework API",
    Category.RUNTIME_API: "runtime API",
    Category.DRIVER_API: "driver API",
    Category.LIBRARY_CALL: "library call",
    Category.KERNEL: "kernel/device code",
    Category.BUILD: "build",
    Category.BINARY: "binary",
    Category.DEPENDENCY: "dependency",
    Category.SEMANTIC_HAZARD: "semantic hazard",
}


class Effort(str, Enum):
    """How much human work a finding needs (SYCLomatic's analysis levels)."""

    NONE = "none"
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"

    @property
    def rank(self) -> int:
        return list(Effort).index(self)


class Route(str, Enum):
    """The migration route a finding, a file or a project calls for."""

    A = "A"  # framework-level port: change devices and a few APIs
    B = "B"  # operator rewrite: kernels and CUDA libraries need portable replacements
    C = "C"  # dual-stack transition: keep a CUDA pool while route-B work proceeds

    @property
    def title(self) -> str:
        return _ROUTE_TITLES[self]

    @property
    def rank(self) -> int:
        return list(Route).index(self)


_ROUTE_TITLES = {
    Route.A: "framework-level port",
    Route.B: "operator rewrite",
    Route.C: "dual-stack transition",
}


class BackendStatus(str, Enum):
    """How a finding fares on one target vendor."""

    OK = "ok"  # works unchanged there (ROCm reuses torch.cuda, for example)
    PORTABLE = "portable"  # works once rewritten to the suggested portable form
    ALTERNATIVE = "alternative"  # a vendor alternative exists; manual port
    UNSUPPORTED = "unsupported"  # no known way on that vendor
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class Location:
    """A span in a file. Lines and columns are 1-based; `cell` is the notebook cell (1-based)."""

    path: str
    line: int
    column: int
    end_line: int
    end_column: int
    cell: int | None = None

    def __reduce__(self):
        # Positional state pickles several times smaller than a slots dict: scans ship many of these.
        return (Location, (self.path, self.line, self.column, self.end_line, self.end_column, self.cell))

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}:{self.column}"
        return f"{where} (cell {self.cell})" if self.cell is not None else where

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "path": self.path,
            "line": self.line,
            "column": self.column,
            "end_line": self.end_line,
            "end_column": self.end_column,
        }
        if self.cell is not None:
            data["cell"] = self.cell
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Location:
        return cls(
            path=data["path"],
            line=data["line"],
            column=data["column"],
            end_line=data["end_line"],
            end_column=data["end_column"],
            cell=data.get("cell"),
        )


@dataclass(frozen=True, slots=True)
class Finding:
    """One CUDA dependency at one place, classified by a rule."""

    rule_id: str
    category: Category
    family: str
    symbol: str
    message: str
    effort: Effort
    route: Route
    location: Location
    backends: Mapping[str, BackendStatus] = field(default_factory=dict)
    replacement: str | None = None
    snippet: str = ""
    autofix: bool = False
    # An inline `# accelport: <rule>` marker on its line says the finding is known and left for
    # manual work (see source/markers.py).
    acknowledged: bool = False

    def __reduce__(self):
        return (
            Finding,
            (
                self.rule_id,
                self.category,
                self.family,
                self.symbol,
                self.message,
                self.effort,
                self.route,
                self.location,
                self.backends,
                self.replacement,
                self.snippet,
                self.autofix,
                self.acknowledged,
            ),
        )

    def sort_key(self) -> tuple:
        loc = self.location
        return (loc.path, loc.cell or 0, loc.line, loc.column, self.rule_id, self.symbol)

    def to_dict(self) -> dict[str, Any]:
        data = {
            "rule_id": self.rule_id,
            "category": self.category.value,
            "family": self.family,
            "symbol": self.symbol,
            "message": self.message,
            "effort": self.effort.value,
            "route": self.route.value,
            "location": self.location.to_dict(),
            # Vendor order is the knowledge file's; statuses are str enums, so JSON writes their values.
            "backends": dict(self.backends),
            "replacement": self.replacement,
            "snippet": self.snippet,
            "autofix": self.autofix,
        }
        if self.acknowledged:
            data["acknowledged"] = True
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Finding:
        return cls(
            rule_id=data["rule_id"],
            category=Category(data["category"]),
            family=data["family"],
            symbol=data["symbol"],
            message=data["message"],
            effort=Effort(data["effort"]),
            route=Route(data["route"]),
            location=Location.from_dict(data["location"]),
            backends={k: BackendStatus(v) for k, v in data.get("backends", {}).items()},
            replacement=data.get("replacement"),
            snippet=data.get("snippet", ""),
            autofix=data.get("autofix", False),
            acknowledged=data.get("acknowledged", False),
        )


@dataclass(frozen=True, slots=True)
class Rule:
    """A documented check with a stable ID: `AP` + 4 digits, the first digit the category."""

    id: str
    name: str
    category: Category
    family: str
    summary: str
    why: str
    before: str
    after: str
    effort: Effort
    autofix: bool
    route: Route
    sources: tuple[str, ...] = ()
    fix: str = ""  # what `migrate` does, or what to do by hand

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "category": self.category.value,
            "family": self.family,
            "summary": self.summary,
            "why": self.why,
            "before": self.before,
            "after": self.after,
            "effort": self.effort.value,
            "autofix": self.autofix,
            "route": self.route.value,
            "fix": self.fix,
            "sources": list(self.sources),
        }


@dataclass(frozen=True, slots=True)
class SkippedFile:
    """A file that was meant to be scanned and was not, with the reason."""

    path: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"path": self.path, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class RouteDecision:
    """A recommended route with the reasons that led to it."""

    route: Route
    reasons: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"route": self.route.value, "title": self.route.title, "reasons": list(self.reasons)}


@dataclass(frozen=True, slots=True)
class EffortEstimate:
    """Findings per effort level and the hour range they add up to."""

    by_level: Mapping[str, int]
    hours_low: float
    hours_high: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "by_level": dict(self.by_level),
            "hours": {"low": round(self.hours_low, 1), "high": round(self.hours_high, 1)},
        }


@dataclass(frozen=True, slots=True)
class FileSummary:
    """Route and effort for one file that has findings."""

    path: str
    findings: int
    route: RouteDecision
    effort: EffortEstimate

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "findings": self.findings,
            "route": self.route.to_dict(),
            "effort": self.effort.to_dict(),
        }


@functools.cache
def compact_encoder() -> Callable[[Any], str]:
    """One-line JSON through json's C encoder (an indented dump goes through its pure-Python one)."""
    return json.JSONEncoder(ensure_ascii=False, separators=(", ", ": ")).encode


def json_block(lines: list[str], indent: str = "    ") -> str:
    """Already-encoded items as a JSON array, one per line at `indent`, its bracket two spaces less."""
    return "[\n" + ",\n".join(indent + line for line in lines) + "\n" + indent[:-2] + "]" if lines else "[]"


def finding_lines(findings: Sequence[Finding]) -> list[str]:
    """Each finding as one compact JSON object, exactly as `Finding.to_dict` would encode.

    Findings of one rule and symbol share most of their fields, and findings of one file
    their path: those parts are encoded once, the rest (place, snippet) per finding.
    """
    compact = compact_encoder()
    heads: dict[tuple, str] = {}
    middles: dict[tuple, str] = {}
    paths: dict[str, str] = {}
    out = []
    for f in findings:
        key = (f.rule_id, f.category, f.family, f.symbol, f.message, f.effort, f.route)
        head = heads.get(key)
        if head is None:
            fields = {"rule_id": f.rule_id, "category": f.category.value, "family": f.family, "symbol": f.symbol,
                      "message": f.message, "effort": f.effort.value, "route": f.route.value}  # fmt: skip
            head = heads[key] = compact(fields)[:-1] + ', "location": '
        # Statuses are shared dicts (one per rule and API); all findings are alive here, so ids are stable.
        key = (id(f.backends), f.replacement)
        middle = middles.get(key)
        if middle is None:
            middle = middles[key] = (
                f', "backends": {compact(dict(f.backends))}, "replacement": {compact(f.replacement)}, "snippet": '
            )
        where = f.location
        path = paths.get(where.path)
        if path is None:
            path = paths[where.path] = compact(where.path)
        cell = "" if where.cell is None else f', "cell": {where.cell}'
        tail = ', "autofix": true' if f.autofix else ', "autofix": false'
        if f.acknowledged:
            tail += ', "acknowledged": true'
        out.append(
            f'{head}{{"path": {path}, "line": {where.line}, "column": {where.column}, "end_line": {where.end_line}, '
            f'"end_column": {where.end_column}{cell}}}{middle}{compact(f.snippet)}{tail}}}'
        )
    return out


@dataclass(slots=True)
class Report:
    """Everything one inventory run found, and what it could not look at."""

    tool_version: str
    roots: list[str]
    findings: list[Finding]
    files_scanned: int
    lines_scanned: int
    skipped: list[SkippedFile]
    route: RouteDecision
    effort: EffortEstimate
    files: list[FileSummary]
    target: str | None = None
    schema_version: str = SCHEMA_VERSION

    def summary(self) -> dict[str, Any]:
        by_category: Counter[str] = Counter()
        by_effort: Counter[str] = Counter()
        by_route: Counter[str] = Counter()
        by_rule: Counter[str] = Counter()
        autofixable = acknowledged = 0
        for f in self.findings:  # one pass: large trees have tens of thousands of findings
            by_category[f.category] += 1
            by_effort[f.effort] += 1
            by_route[f.route] += 1
            by_rule[f.rule_id] += 1
            autofixable += f.autofix
            acknowledged += f.acknowledged
        return {
            "findings": len(self.findings),
            "files_scanned": self.files_scanned,
            "files_with_findings": len(self.files),
            "files_skipped": len(self.skipped),
            "lines_scanned": self.lines_scanned,
            "by_category": {c.value: by_category.get(c, 0) for c in Category},
            "by_effort": {e.value: by_effort.get(e, 0) for e in Effort},
            "by_route": {r.value: by_route.get(r, 0) for r in Route},
            "by_rule": dict(sorted(by_rule.items())),
            "autofixable": autofixable,
            "acknowledged": acknowledged,
        }

    def to_dict(self, with_findings: bool = True) -> dict[str, Any]:
        data = {
            "$schema": SCHEMA_ID,
            "schema_version": self.schema_version,
            "tool": {"name": "accelport", "version": self.tool_version},
            "roots": list(self.roots),
            "target": self.target,
            "summary": self.summary(),
            "route": self.route.to_dict(),
            "effort": self.effort.to_dict(),
            "files": [f.to_dict() for f in self.files],
            "findings": [f.to_dict() for f in self.findings] if with_findings else None,
            "skipped": [s.to_dict() for s in self.skipped],
        }
        if not with_findings:
            del data["findings"]
        return data

    def to_json(self) -> str:
        """Readable JSON: the summary indented, then one finding per line.

        An indented dump of every finding goes through json's pure-Python encoder and
        dominated the run time on large trees; compact lines use the C encoder, and
        the parts findings share (rule, symbol, message, statuses) are encoded once.
        """
        data = self.to_dict(with_findings=False)
        skipped = data.pop("skipped")
        files = data.pop("files")
        head = json.dumps(data, indent=2, ensure_ascii=False)[:-2]  # drop the closing "\n}"
        compact = compact_encoder()
        return (
            f'{head},\n  "files": {json_block([compact(f) for f in files])},\n'
            f'  "findings": {json_block(finding_lines(self.findings))},\n'
            f'  "skipped": {json_block([compact(s) for s in skipped])}\n}}\n'
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Report:
        def decision(d: Mapping[str, Any]) -> RouteDecision:
            return RouteDecision(Route(d["route"]), tuple(d["reasons"]))

        def estimate(d: Mapping[str, Any]) -> EffortEstimate:
            return EffortEstimate(dict(d["by_level"]), d["hours"]["low"], d["hours"]["high"])

        return cls(
            tool_version=data["tool"]["version"],
            roots=list(data["roots"]),
            findings=[Finding.from_dict(f) for f in data["findings"]],
            files_scanned=data["summary"]["files_scanned"],
            lines_scanned=data["summary"]["lines_scanned"],
            skipped=[SkippedFile(s["path"], s["reason"]) for s in data["skipped"]],
            route=decision(data["route"]),
            effort=estimate(data["effort"]),
            files=[
                FileSummary(f["path"], f["findings"], decision(f["route"]), estimate(f["effort"]))
                for f in data["files"]
            ],
            target=data.get("target"),
            schema_version=data["schema_version"],
        )


def report_schema() -> dict[str, Any]:
    """The JSON Schema that every inventory report validates against."""
    from importlib import resources

    text = resources.files("accelport.schemas").joinpath("inventory-report.schema.json").read_text()
    return json.loads(text)


def sorted_findings(findings: Iterable[Finding]) -> list[Finding]:
    return sorted(findings, key=Finding.sort_key)
