"""Portable equivalents for hand-written kernels and CUDA library calls (data: knowledge/kernel_equivalents.toml)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

from accelport import knowledge


@dataclass(frozen=True, slots=True)
class OperatorEquivalent:
    """An accelport operator that can replace a kernel or a library call."""

    name: str
    replacement: str  # "accelport.kernels rms_norm"
    torch: str
    kernel_patterns: tuple[re.Pattern[str], ...]
    library_calls: tuple[re.Pattern[str], ...]


@cache
def operators() -> tuple[OperatorEquivalent, ...]:
    found = []
    for table in knowledge.read_toml("kernel_equivalents.toml")["operator"]:
        found.append(
            OperatorEquivalent(
                name=table["name"],
                replacement=table["replacement"],
                torch=table.get("torch", ""),
                kernel_patterns=tuple(re.compile(p) for p in table.get("kernel_patterns", ())),
                library_calls=tuple(re.compile(p) for p in table.get("library_calls", ())),
            )
        )
    return tuple(found)


def _normalise(name: str) -> str:
    base = name.rsplit("::", 1)[-1]
    return re.sub(r"[_\d]", "", base.lower())


@cache
def equivalent_for_kernel(name: str) -> OperatorEquivalent | None:
    """The operator a kernel named `name` most likely implements, or None."""
    normal = _normalise(name)
    for operator in operators():
        if any(p.search(normal) for p in operator.kernel_patterns):
            return operator
    return None


@cache
def equivalent_for_library_call(symbol: str) -> str | None:
    """The replacement line for a library function that an operator covers, or None."""
    for operator in operators():
        if any(p.fullmatch(symbol) for p in operator.library_calls):
            return operator.replacement
    return None
