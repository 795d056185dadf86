"""Ask torch what a composite operator calls, and what it decomposes an operator into.

The tracer keeps one sample of each operator's arguments as meta tensors (no memory, no
arithmetic). A CompositeExplicitAutograd kernel works on a backend only if the operators it
calls do, so its delegates are found by running that kernel on the sample under a recorder.
For an operator a backend lacks, `torch._decomp` may hold a decomposition into others.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from accelport.coverage.oplists import aten_facts
from accelport.coverage.records import NOISE_NAMESPACES, canonical

log = logging.getLogger(__name__)

_COMPOSITE_KEY = {
    "explicit": "CompositeExplicitAutograd",
    "explicit_nonfunctional": "CompositeExplicitAutogradNonFunctional",
}


class _NoSample(Exception):
    pass


def _meta_copy(torch: Any, value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        if value.is_sparse or any(not isinstance(s, int) for s in value.shape):
            raise _NoSample
        return torch.empty_strided(tuple(value.shape), tuple(value.stride()), dtype=value.dtype, device="meta")
    if isinstance(value, torch.SymInt | torch.SymFloat | torch.SymBool):
        raise _NoSample
    if isinstance(value, torch.device) and value.type != "cpu":
        return torch.device("meta")
    return value


class Probe:
    """Samples of operator arguments, and what running composites and decompositions on them shows."""

    def __init__(self) -> None:
        self.samples: dict[str, tuple[Any, tuple, dict]] = {}
        self.by_dtype: dict[tuple[str, str], tuple[Any, tuple, dict]] = {}
        self._delegates: dict[str, list[str] | None] = {}
        self._decompositions: dict[str, list[str] | None] = {}

    def keep(self, op: str, func: Any, args: tuple, kwargs: dict, dtypes: str = "") -> None:
        """Remember one call of `op` per dtype signature as meta tensors (the first whose arguments can be copied)."""
        if (op, dtypes) in self.by_dtype or (not dtypes and op in self.samples):
            return
        import torch
        from torch.utils._python_dispatch import _disable_current_modes
        from torch.utils._pytree import tree_map

        try:
            with _disable_current_modes():
                copied = tree_map(lambda v: _meta_copy(torch, v), (args, kwargs))
        except (_NoSample, RuntimeError, TypeError):
            return
        sample = (func, copied[0], copied[1])
        self.samples.setdefault(op, sample)
        if dtypes:
            self.by_dtype[(op, dtypes)] = sample

    def _record(self, run: Callable[[], Any]) -> list[str] | None:
        """The operators `run` dispatches, in first-call order; None when it fails on the sample."""
        from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

        probe = self
        seen: list[str] = []

        class Inner(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                if func.namespace not in NOISE_NAMESPACES:
                    op = canonical(func)
                    if op not in seen:
                        seen.append(op)
                    probe.keep(op, func, args, kwargs)
                return func(*args, **kwargs)

        try:
            with _disable_current_modes(), Inner():
                run()
        except Exception as exc:  # the kernel needs real data, another device, ...: unknown, said so
            log.debug("probe failed: %s", exc)
            return None
        return seen

    def delegates(self, op: str) -> list[str] | None:
        """The operators `op`'s composite kernel calls ([] when it calls none); None if unknown."""
        if op in self._delegates:
            return self._delegates[op]
        result: list[str] | None = None
        kind = aten_facts().composite_kind(op)
        sample = self.samples.get(op)
        if kind in _COMPOSITE_KEY and sample is not None:
            from torch._C import DispatchKey

            func, args, kwargs = sample
            key = getattr(DispatchKey, _COMPOSITE_KEY[kind])
            result = self._record(lambda: func._op_dk(key, *args, **kwargs))
            if result is not None:
                result = [name for name in result if name != op]
        self._delegates[op] = result
        return result

    def decomposition(self, op: str) -> list[str] | None:
        """The operators torch._decomp's decomposition of `op` calls; None when torch has none."""
        if op in self._decompositions:
            return self._decompositions[op]
        result: list[str] | None = None
        sample = self.samples.get(op)
        if sample is not None:
            from torch._decomp import decomposition_table

            func, args, kwargs = sample
            decompose = decomposition_table.get(func)
            if decompose is not None:
                result = self._record(lambda: decompose(*args, **kwargs))
                if result is not None:
                    result = [name for name in result if name != op]
                # A reference built on prims is a compiler's lowering, not something a user can call instead.
                if result is not None and any(name.startswith("prims::") for name in result):
                    result = None
        self._decompositions[op] = result
        return result

    def known(self) -> dict[str, dict[str, list[str] | None]]:
        """What has been asked so far, for the JSON report."""
        found: dict[str, dict[str, list[str] | None]] = {}
        for op, value in self._delegates.items():
            found.setdefault(op, {})["delegates"] = value
        for op, value in self._decompositions.items():
            found.setdefault(op, {})["decomposition"] = value
        return found


__all__ = ["Probe", "canonical"]
