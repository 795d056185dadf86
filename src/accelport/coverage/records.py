"""What a trace found: each operator with its calls, phases, dtypes and the code that issued it."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from accelport import knowledge

# Operators that only say how the trace itself ran (FakeTensor device queries, profiler ranges).
NOISE_NAMESPACES = frozenset({"prim", "profiler"})
SDPA = "scaled_dot_product_attention"
HOST = "host"  # region of calls whose tensors all live on the CPU while the model is elsewhere
MAX_SITES = 8
MAX_DTYPES = 8


@dataclass(frozen=True)
class Site:
    """Where a call came from: the module that was running and the first line of user code."""

    module: str  # "blocks.0.attn (MultiheadAttention)"; "" when no module was running
    location: str  # "model.py:42"; "" when only library code was on the stack
    phase: str  # forward | backward | optimizer

    def to_dict(self) -> dict[str, str]:
        return {"module": self.module, "location": self.location, "phase": self.phase}


@dataclass
class OpRecord:
    """One operator as the trace saw it."""

    op: str  # canonical name: "add.Tensor", "mm", "torchvision::nms"
    region: str = ""  # SDPA: made inside the call, how this device ran it; host: CPU-only work (step counters)
    calls: int = 0
    phases: Counter = field(default_factory=Counter)
    dtypes: list[str] = field(default_factory=list)
    sites: Counter = field(default_factory=Counter)

    def add(self, site: Site, dtypes: str) -> None:
        self.calls += 1
        self.phases[site.phase] += 1
        if dtypes not in self.dtypes and len(self.dtypes) < MAX_DTYPES:
            self.dtypes.append(dtypes)
        if site in self.sites or len(self.sites) < MAX_SITES:
            self.sites[site] += 1

    @property
    def first_site(self) -> Site | None:
        return self.sites.most_common(1)[0][0] if self.sites else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "region": self.region or None,
            "calls": self.calls,
            "phases": dict(self.phases),
            "dtypes": list(self.dtypes),
            "sites": [{**site.to_dict(), "calls": n} for site, n in self.sites.most_common()],
        }


@dataclass(frozen=True)
class Attempt:
    strategy: str
    ok: bool
    seconds: float
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"strategy": self.strategy, "ok": self.ok, "seconds": round(self.seconds, 3), "reason": self.reason}


STRATEGY_TITLES = {
    "meta": "meta device",
    "fake": "FakeTensorMode with a ShapeEnv",
    "cpu": "a real CPU run",
}


@dataclass
class Trace:
    """The operators one step ran, and how they were found."""

    spec: str
    mode: str  # train | infer
    strategy: str
    device: str  # the device type tensors claimed during the trace (meta, cpu)
    attempts: list[Attempt]
    records: dict[tuple[str, str], OpRecord]
    seconds: float
    model: str = ""
    parameters: int = 0
    notes: list[str] = field(default_factory=list)
    # Lazily answers "which operators does this composite call" / "what does torch decompose it into";
    # present only in the process that traced (samples of the real arguments live there).
    probe: Any = field(default=None, repr=False, compare=False)

    @property
    def total_calls(self) -> int:
        return sum(r.calls for r in self.records.values() if not r.region)

    def judged(self) -> list[OpRecord]:
        """The records a backend is judged on: device-dependent implementations folded away, names normalised."""
        merged: dict[str, OpRecord] = {}
        for record in self.records.values():
            if record.region:
                continue
            name = normalise(record.op)
            target = merged.get(name)
            if target is None:
                target = merged[name] = OpRecord(op=name)
            target.calls += record.calls
            target.phases.update(record.phases)
            for dtype in record.dtypes:
                if dtype not in target.dtypes and len(target.dtypes) < MAX_DTYPES:
                    target.dtypes.append(dtype)
            for site, n in record.sites.items():
                if site in target.sites or len(target.sites) < MAX_SITES:
                    target.sites[site] += n
        return sorted(merged.values(), key=lambda r: r.op)

    def normalised_ops(self) -> set[str]:
        """Every operator the step ran, device-dependent implementations folded, host work included."""
        return {r.op for r in self.judged()} | {normalise(r.op) for r in self.host()}

    def folded(self) -> list[OpRecord]:
        """Calls made inside device-dependent regions (how this trace device ran SDPA, say)."""
        return sorted((r for r in self.records.values() if r.region and r.region != HOST), key=lambda r: (r.region, r.op))

    def host(self) -> list[OpRecord]:
        """Calls on CPU tensors only, seen while the model was on meta: the CPU runs them on any machine."""
        return sorted((r for r in self.records.values() if r.region == HOST), key=lambda r: r.op)

    def delegates(self, op: str) -> list[str] | None:
        return self.probe.delegates(op) if self.probe is not None else None

    def decomposition(self, op: str) -> list[str] | None:
        return self.probe.decomposition(op) if self.probe is not None else None

    def describe_strategy(self) -> str:
        text = f"{STRATEGY_TITLES.get(self.strategy, self.strategy)}"
        failed = [a for a in self.attempts if not a.ok]
        if failed:
            text += " after " + "; ".join(f"{STRATEGY_TITLES.get(a.strategy, a.strategy)} failed ({a.reason})" for a in failed)
        return text

    def to_dict(self) -> dict[str, Any]:
        judged = self.judged()
        return {
            "spec": self.spec,
            "mode": self.mode,
            "strategy": self.strategy,
            "device": self.device,
            "attempts": [a.to_dict() for a in self.attempts],
            "seconds": round(self.seconds, 3),
            "model": self.model,
            "parameters": self.parameters,
            "total_calls": self.total_calls,
            "notes": list(self.notes),
            "ops": [r.to_dict() for r in judged],
            "folded": [r.to_dict() for r in self.folded()],
            "host": [r.to_dict() for r in self.host()],
        }


# --------------------------------------------------------------------------- naming


def canonical(func: Any) -> str:
    """`aten.add.Tensor` -> `add.Tensor`, `aten.mm.default` -> `mm`, `torchvision.nms.default` -> `torchvision::nms`."""
    namespace = func.namespace
    name = func._schema.name.split("::", 1)[1]
    overload = func._overloadname
    full = name if overload == "default" else f"{name}.{overload}"
    return full if namespace == "aten" else f"{namespace}::{full}"


@cache
def _families() -> dict[str, dict[str, str]]:
    return {entry["op"]: entry for entry in knowledge.read_toml("op_families.toml").get("family", [])}


def normalise(op: str) -> str:
    """The name a backend is judged on: device-only kernels become the operator the user called."""
    entry = _families().get(op)
    return entry["as"] if entry else op


def family_note(op: str) -> str | None:
    entry = _families().get(op)
    return entry.get("why") if entry else None


@cache
def _advice() -> tuple[dict[str, Any], ...]:
    return tuple(knowledge.read_toml("op_families.toml").get("replacement", []))


def replacement(op: str) -> str | None:
    """Known advice for an operator a backend lacks (from knowledge/op_families.toml)."""
    base = op.split(".")[0]
    for entry in _advice():
        if entry.get("op") in (op, base) or (entry.get("prefix") and op.startswith(entry["prefix"])):
            return entry["advice"]
    return None
