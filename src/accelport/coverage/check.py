"""Judge each traced operator on a backend: native, via its `.out` delegate, composite, fallback or missing.

Offline the kernels come from an operator list; on the target machine from the live
dispatcher (`torch._C._dispatch_dump_table`), whose line for the backend's dispatch key reads
`[kernel]`, `[math kernel]` (CompositeImplicitAutograd), `[default backend kernel]`
(CompositeExplicitAutograd or a structured op's generated wrapper) or `[backend fallback]`
(a boxed fallback: usually a silent copy to the CPU). `_dispatch_has_computed_kernel_for_dispatch_key`
is not used: it says yes for nearly everything once a backend registers a fallback.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

from accelport.coverage.oplists import UNKNOWN_TORCH, AtenFacts, OpList, aten_facts, oplist_for
from accelport.coverage.records import OpRecord, Trace, replacement


class Status(str, Enum):
    NATIVE = "native"  # the backend has a kernel of its own
    DELEGATE = "delegate"  # runs the structured `.out` kernel, which the backend has
    COMPOSITE = "composite"  # a composite kernel: needs none of its own, and what it calls is covered
    UNKNOWN = "unknown"  # the list does not say (partial list, or a namespace it does not cover)
    FALLBACK = "fallback"  # on the device: the backend's boxed fallback runs it (usually on the CPU)
    MISSING = "missing"  # no kernel: NotImplementedError, or a CPU fallback the backend may do silently

    @property
    def ok(self) -> bool:
        return self in (Status.NATIVE, Status.DELEGATE, Status.COMPOSITE)

    @property
    def severity(self) -> int:
        return list(Status).index(self)


class KernelSource(Protocol):
    """What a backend has registered for one operator (see the module docstring for the kinds)."""

    def kind(self, op: str) -> str: ...


@dataclass(frozen=True)
class ListSource:
    """An operator list, with torch's own facts for what the list leaves out."""

    oplist: OpList
    facts: AtenFacts

    def kind(self, op: str) -> str:
        if op in self.oplist.ops:
            return "kernel"
        if "::" in op:
            namespace = op.split("::", 1)[0] + "::"
            return "none" if any(name.startswith(namespace) for name in self.oplist.ops) else "unknown"
        composite = self.facts.composite_kind(op)
        if composite == "implicit":
            return "math"
        if composite is not None:
            return "default"
        return "none" if self.oplist.complete else "unknown"


_TAGS = (
    ("[backend fallback]", "fallback"),
    ("[math kernel]", "math"),
    ("[default backend kernel]", "default"),
    ("[kernel]", "kernel"),
)


@dataclass
class DispatcherSource:
    """The live dispatcher of this process, for one dispatch key (PrivateUse1, XPU, CUDA, ...)."""

    key: str
    tables: dict[str, str] = field(default_factory=dict)

    def line(self, op: str) -> str:
        if op not in self.tables:
            import torch

            qualified = op if "::" in op else f"aten::{op}"
            try:
                table = torch._C._dispatch_dump_table(qualified)
            except RuntimeError:
                table = ""
            prefix = f"{self.key}:"
            self.tables[op] = next((ln for ln in table.splitlines() if ln.startswith(prefix)), "")
        return self.tables[op]

    def kind(self, op: str) -> str:
        line = self.line(op)
        if not line or "fallthrough" in line:
            return "none"
        for tag, kind in _TAGS:
            if line.endswith(tag):
                return kind
        return "kernel"


@dataclass
class OpVerdict:
    op: str
    status: Status
    via: list[str] = field(default_factory=list)  # the delegate, or the operators a composite calls
    detail: str = ""
    record: OpRecord | None = None
    advice: str = ""
    decomposition: list[tuple[str, Status]] | None = None
    smoke: dict[str, str] = field(default_factory=dict)  # dtype signature -> "ok" | error

    @property
    def smoke_failed(self) -> bool:
        return any(result != "ok" and not result.startswith("skipped") for result in self.smoke.values())

    def to_dict(self, total_calls: int) -> dict[str, Any]:
        data: dict[str, Any] = {"op": self.op, "status": self.status.value, "via": list(self.via), "detail": self.detail}
        if self.record is not None:
            data["calls"] = self.record.calls
            data["share"] = round(self.record.calls / total_calls, 4) if total_calls else 0.0
            data["phases"] = dict(self.record.phases)
            data["dtypes"] = list(self.record.dtypes)
            data["sites"] = [{**site.to_dict(), "calls": n} for site, n in self.record.sites.most_common()]
        if self.advice:
            data["advice"] = self.advice
        if self.decomposition is not None:
            data["decomposition"] = [{"op": op, "status": status.value} for op, status in self.decomposition]
        if self.smoke:
            data["smoke"] = dict(self.smoke)
        return data


@dataclass
class TargetResult:
    """One backend's verdict on every judged operator of a trace."""

    vendor: str
    label: str  # "torch_npu 2.13.0", "live dispatcher (PrivateUse1)"
    on_device: bool
    verdicts: list[OpVerdict]
    oplist: OpList | None = None
    unlisted: str = ""
    notes: list[str] = field(default_factory=list)

    def count(self, status: Status) -> int:
        return sum(1 for v in self.verdicts if v.status is status)

    def by_status(self, *statuses: Status) -> list[OpVerdict]:
        return [v for v in self.verdicts if v.status in statuses]

    @property
    def failed(self) -> bool:
        return any(v.status in (Status.MISSING, Status.FALLBACK) or v.smoke_failed for v in self.verdicts)

    def summary(self) -> dict[str, int]:
        return {status.value: self.count(status) for status in Status}

    def to_dict(self, total_calls: int) -> dict[str, Any]:
        return {
            "vendor": self.vendor,
            "label": self.label,
            "on_device": self.on_device,
            "oplist": self.oplist.to_dict() if self.oplist is not None else None,
            "unlisted": self.unlisted,
            "failed": self.failed,
            "summary": self.summary(),
            "notes": list(self.notes),
            "ops": [v.to_dict(total_calls) for v in self.verdicts],
        }


@dataclass
class CoverageReport:
    trace: Trace
    targets: list[TargetResult]

    @property
    def failed(self) -> bool:
        return any(t.failed for t in self.targets)

    def to_dict(self) -> dict[str, Any]:
        data = {"schema": "accelport-ops/1", "trace": self.trace.to_dict(), "targets": [t.to_dict(self.trace.total_calls) for t in self.targets]}
        if self.trace.probe is not None:
            data["probes"] = self.trace.probe.known()
        data["failed"] = self.failed
        return data


# --------------------------------------------------------------------------- resolving one operator


class _Resolver:
    MAX_DEPTH = 6

    def __init__(self, source: KernelSource, facts: AtenFacts, trace: Trace) -> None:
        self.source = source
        self.facts = facts
        self.trace = trace
        self.cache: dict[str, OpVerdict] = {}

    def resolve(self, op: str, depth: int = 0) -> OpVerdict:
        if op in self.cache:
            return self.cache[op]
        self.cache[op] = OpVerdict(op, Status.UNKNOWN, detail="resolving (cycle)")  # guards recursion
        verdict = self._resolve(op, depth)
        self.cache[op] = verdict
        return verdict

    def _resolve(self, op: str, depth: int) -> OpVerdict:
        kind = self.source.kind(op)
        if kind == "kernel":
            return OpVerdict(op, Status.NATIVE)
        if kind == "fallback":
            return OpVerdict(op, Status.FALLBACK, detail="the backend's boxed fallback runs it (usually a silent copy to the CPU)")
        if kind == "unknown":
            return OpVerdict(op, Status.UNKNOWN, detail="the operator list does not cover this operator")
        if kind == "math":
            return OpVerdict(op, Status.COMPOSITE, detail="CompositeImplicitAutograd: decomposes into other operators")
        delegate = self.facts.structured_delegate(op)
        if delegate and depth < self.MAX_DEPTH:
            sub = self.resolve(delegate, depth + 1)
            if sub.status in (Status.NATIVE, Status.DELEGATE, Status.COMPOSITE):
                return OpVerdict(op, Status.DELEGATE, via=[delegate], detail=f"structured: runs {delegate}")
            return OpVerdict(op, sub.status, via=[delegate], detail=f"structured: runs {delegate}, which is {sub.status.value}")
        if kind == "default":
            return self._composite(op, depth)
        return OpVerdict(op, Status.MISSING, detail="no kernel and no composite implementation")

    def _composite(self, op: str, depth: int) -> OpVerdict:
        calls = self.trace.delegates(op)
        if calls is None:
            return OpVerdict(op, Status.COMPOSITE, detail="CompositeExplicitAutograd kernel; the operators it calls were not checked")
        if not calls:
            return OpVerdict(op, Status.COMPOSITE, detail="CompositeExplicitAutograd kernel that calls no other operator")
        if depth >= self.MAX_DEPTH:
            return OpVerdict(op, Status.COMPOSITE, via=calls, detail="CompositeExplicitAutograd kernel (nested too deep to check)")
        subs = [self.resolve(call, depth + 1) for call in calls]
        worst = max(subs, key=lambda v: v.status.severity)
        if worst.status.ok:
            return OpVerdict(op, Status.COMPOSITE, via=calls, detail=f"CompositeExplicitAutograd kernel calling {', '.join(calls)}")
        bad = [v.op for v in subs if v.status is worst.status]
        return OpVerdict(
            op,
            worst.status,
            via=calls,
            detail=f"its CompositeExplicitAutograd kernel calls {', '.join(bad)}, which is {worst.status.value}",
        )


def _finish(verdict: OpVerdict, record: OpRecord, resolver: _Resolver) -> OpVerdict:
    verdict = OpVerdict(verdict.op, verdict.status, list(verdict.via), verdict.detail, record=record)
    if not verdict.status.ok:
        verdict.advice = replacement(verdict.op) or ""
        parts = resolver.trace.decomposition(verdict.op)
        if parts:
            verdict.decomposition = [(part, resolver.resolve(part).status) for part in parts]
    return verdict


def judge(trace: Trace, source: KernelSource, facts: AtenFacts | None = None) -> list[OpVerdict]:
    resolver = _Resolver(source, facts or aten_facts(), trace)
    return [_finish(resolver.resolve(record.op), record, resolver) for record in trace.judged()]


def check(trace: Trace, targets: Iterable[str]) -> CoverageReport:
    """Offline: judge the trace against each target's operator list (`VENDOR` or `VENDOR@VERSION`)."""
    results = []
    facts = aten_facts()
    for target in targets:
        oplist = oplist_for(target)
        verdicts = judge(trace, ListSource(oplist, facts), facts)
        notes = [] if oplist.complete else [f"partial list, an operator it does not name may still have a kernel: {oplist.unlisted}"]
        if oplist.torch_version == UNKNOWN_TORCH:
            notes.append(f"the list does not say which torch version it is for (source: {oplist.source or oplist.origin})")
        elif oplist.torch_version and facts.torch_version and oplist.torch_version != facts.torch_version:
            notes.append(f"list made for torch {oplist.torch_version}; operator facts from torch {facts.torch_version}")
        results.append(
            TargetResult(
                vendor=oplist.vendor,
                label=oplist.label,
                on_device=False,
                verdicts=verdicts,
                oplist=oplist,
                unlisted=oplist.unlisted,
                notes=notes,
            )
        )
    return CoverageReport(trace, results)
