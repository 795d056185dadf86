"""Per-vendor statuses of the C/C++/CUDA scanner's findings, from the vendor profiles and the API catalogue."""

from __future__ import annotations

from accelport import knowledge
from accelport.findings import BackendStatus
from accelport.inventory.base import (
    backend_statuses,
)
from accelport.inventory.cuda_api import ApiEntry, catalogue


def _entry_backends(entry: ApiEntry) -> dict[str, BackendStatus]:
    return _symbol_backends(entry.symbol) if entry.in_table else entry.backends()


@knowledge.derived_cache
def _symbol_backends(symbol: str) -> dict[str, BackendStatus]:
    return catalogue().lookup(symbol).backends()


def _rocm_name(entry: ApiEntry | None) -> str | None:
    return f"{entry.rocm} (ROCm)" if entry is not None and entry.rocm else None


def _by_profile(rule) -> dict[str, BackendStatus]:
    statuses = {}
    for key, profile in knowledge.vendors().items():
        statuses[key] = rule(profile)
    statuses["cuda"] = BackendStatus.OK
    return statuses


@knowledge.derived_cache
def _warp_backends() -> dict[str, BackendStatus]:
    def status(profile):
        if profile.warp_size == 32:
            return BackendStatus.OK
        if profile.warp_size == 0:
            return BackendStatus.UNSUPPORTED  # no warps: the kernel is rewritten anyway
        return BackendStatus.PORTABLE  # fix the width and the masks

    return _by_profile(status)


@knowledge.derived_cache
def _fp64_backends() -> dict[str, BackendStatus]:
    table = {"fast": BackendStatus.OK, "none": BackendStatus.UNSUPPORTED, "slow": BackendStatus.PORTABLE, "emulated": BackendStatus.PORTABLE}
    return _by_profile(lambda p: table.get(p.fp64, BackendStatus.UNKNOWN))


@knowledge.derived_cache
def _kernel_backends() -> dict[str, BackendStatus]:
    # hipcc compiles CUDA kernels after hipify; other stacks need a rewrite.
    return backend_statuses(cuda_like=BackendStatus.PORTABLE, others=BackendStatus.ALTERNATIVE)


@knowledge.derived_cache
def _managed_backends() -> dict[str, BackendStatus]:
    return backend_statuses(cuda_like=BackendStatus.PORTABLE, others=BackendStatus.UNKNOWN)


@knowledge.derived_cache
def _unsupported_off_cuda(rocm: BackendStatus = BackendStatus.UNSUPPORTED) -> dict[str, BackendStatus]:
    statuses = backend_statuses(cuda_like=rocm, others=BackendStatus.UNSUPPORTED)
    statuses["cuda"] = BackendStatus.OK
    return statuses
