"""Hardware profiles: on-chip memory, cores, warp size, matrix units, peaks and bandwidth per accelerator model.

The data lives in `knowledge/kernels/hardware.toml`, with sources; each device names
the vendor profile it belongs to (`accelport.knowledge.vendors()`). A device that has
no profile gets a generic one built from its vendor profile and what torch reports,
with unknown peaks (so benchmarks print no fraction of peak rather than guess).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from accelport import knowledge
from accelport.errors import UserError

log = logging.getLogger(__name__)

DATA_FILE = "kernels/hardware.toml"

# The reference device for each ahead-of-time compile target: its profile decides
# which configs the dispatcher would pick there, and its on-chip memory is the limit.
TARGET_DEVICES: Mapping[str, str] = {"sm_80": "a100-sxm4-80gb", "sm_90": "h100-sxm", "gfx942": "mi300x"}


@dataclass(frozen=True)
class TritonTarget:
    """What `triton.compile` needs to build for a device without having one."""

    backend: str  # "cuda" or "hip"
    arch: int | str  # 90, or "gfx942"
    warp_size: int

    @property
    def label(self) -> str:
        return f"sm_{self.arch}" if self.backend == "cuda" else str(self.arch)

    def gpu_target(self) -> Any:
        from triton.backends.compiler import GPUTarget

        return GPUTarget(self.backend, self.arch, self.warp_size)


@dataclass(frozen=True)
class HardwareProfile:
    """One accelerator model as the configuration generator and the benchmarks see it."""

    key: str
    name: str
    vendor: str
    arch: str
    cores: int
    core_unit: str
    warp_size: int
    max_threads_per_block: int
    onchip_kind: str
    onchip_bytes_per_core: int
    onchip_bytes_per_block: int
    matrix_units: Mapping[str, tuple[int, int, int]]
    peak_tflops: Mapping[str, float]
    bandwidth_gbs: float | None
    memory_gb: float | None
    triton_target: TritonTarget | None = None
    match: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    generic: bool = False  # built from a vendor profile, not from hardware.toml
    extra: Mapping[str, Any] = field(default_factory=dict)

    def peak(self, dtype: str) -> float | None:
        """Peak TFLOP/s for a torch dtype name ('float16', 'bfloat16', ...), None when unknown."""
        return self.peak_tflops.get(dtype)

    def matrix_unit(self, dtype: str) -> tuple[int, int, int] | None:
        return self.matrix_units.get(dtype)

    @property
    def grid_is_physical(self) -> bool:
        """True where a kernel's grid binds to physical cores (Ascend): programs must loop over work."""
        return self.warp_size == 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "name": self.name,
            "vendor": self.vendor,
            "arch": self.arch,
            "triton_target": self.triton_target.label if self.triton_target else None,
            "cores": self.cores,
            "core_unit": self.core_unit,
            "warp_size": self.warp_size,
            "max_threads_per_block": self.max_threads_per_block,
            "onchip_memory": {
                "kind": self.onchip_kind,
                "bytes_per_core": self.onchip_bytes_per_core,
                "bytes_per_block": self.onchip_bytes_per_block,
            },
            "matrix_units": {k: list(v) for k, v in self.matrix_units.items()},
            "peak_tflops": dict(self.peak_tflops),
            "bandwidth_gbs": self.bandwidth_gbs,
            "memory_gb": self.memory_gb,
            "generic": self.generic,
            "sources": list(self.sources),
            "notes": list(self.notes),
            **dict(self.extra),
        }


_KNOWN = {
    "name", "vendor", "match", "arch", "triton_target", "cores", "core_unit", "warp_size",
    "max_threads_per_block", "onchip_memory", "matrix_units", "peak_tflops", "bandwidth_gbs",
    "memory_gb", "sources", "notes",
}  # fmt: skip


def _profile_from_table(key: str, table: Mapping[str, Any]) -> HardwareProfile:
    origin = f"knowledge/{DATA_FILE}: device.{key}"
    vendors = knowledge.vendors()
    if table.get("vendor") not in vendors:
        raise UserError(f"{origin}: vendor {table.get('vendor')!r} is not a vendor profile; use one of {', '.join(vendors)}")
    try:
        target = table.get("triton_target")
        mem = table["onchip_memory"]
        return HardwareProfile(
            key=key,
            name=table["name"],
            vendor=table["vendor"],
            arch=table["arch"],
            cores=int(table["cores"]),
            core_unit=table["core_unit"],
            warp_size=int(table["warp_size"]),
            max_threads_per_block=int(table["max_threads_per_block"]),
            onchip_kind=mem["kind"],
            onchip_bytes_per_core=int(mem["bytes_per_core"]),
            onchip_bytes_per_block=int(mem["bytes_per_block"]),
            matrix_units={k: tuple(v) for k, v in table.get("matrix_units", {}).items()},
            peak_tflops={k: float(v) for k, v in table.get("peak_tflops", {}).items()},
            bandwidth_gbs=float(table["bandwidth_gbs"]) if "bandwidth_gbs" in table else None,
            memory_gb=float(table["memory_gb"]) if "memory_gb" in table else None,
            triton_target=TritonTarget(target["backend"], target["arch"], int(target["warp_size"])) if target else None,
            match=tuple(table.get("match", ())),
            sources=tuple(table.get("sources", ())),
            notes=tuple(table.get("notes", ())),
            extra={k: v for k, v in table.items() if k not in _KNOWN},
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise UserError(f"{origin}: invalid entry ({exc!r}); see the field list at the top of the file") from None


@cache
def profiles() -> dict[str, HardwareProfile]:
    """Every hardware profile in knowledge/kernels/hardware.toml, keyed by device key."""
    data = knowledge.read_toml(DATA_FILE)
    return {key: _profile_from_table(key, table) for key, table in data["device"].items()}


def profile(key: str) -> HardwareProfile:
    known = profiles()
    if key not in known:
        raise UserError(f"unknown device profile {key!r}; known: {', '.join(sorted(known))}")
    return known[key]


def for_target(target: str) -> HardwareProfile:
    """The reference device of an AOT target label (sm_80, sm_90, gfx942)."""
    if target not in TARGET_DEVICES:
        raise UserError(f"unknown compile target {target!r}; targets: {', '.join(TARGET_DEVICES)}")
    return profile(TARGET_DEVICES[target])


def match_name(device_name: str) -> HardwareProfile | None:
    """The profile whose longest `match` pattern occurs in `device_name` (case-insensitive)."""
    best: tuple[int, HardwareProfile] | None = None
    lowered = device_name.lower()
    for candidate in profiles().values():
        for pattern in candidate.match:
            if pattern.lower() in lowered and (best is None or len(pattern) > best[0]):
                best = (len(pattern), candidate)
    return best[1] if best else None


def generic(vendor_key: str, name: str, cores: int = 0) -> HardwareProfile:
    """A profile for a device without an entry: on-chip memory and warp size from its vendor profile."""
    vendor = knowledge.vendor(vendor_key)
    mem = vendor.onchip_memory
    onchip = mem.bytes_per_core if mem else 0
    return HardwareProfile(
        key=slug(name),
        name=name,
        vendor=vendor_key,
        arch="unknown",
        cores=cores,
        core_unit=mem.unit if mem else "core",
        warp_size=vendor.warp_size,
        max_threads_per_block=1024 if vendor.warp_size else 0,
        onchip_kind=mem.kind if mem else "unknown",
        onchip_bytes_per_core=onchip,
        onchip_bytes_per_block=onchip,
        matrix_units={},
        peak_tflops={},
        bandwidth_gbs=None,
        memory_gb=None,
        sources=tuple(vendor.sources),
        notes=(f"generic profile from vendor {vendor_key}: peaks and bandwidth unknown",),
        generic=True,
    )


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "device"


def device_name(device: Any) -> str:
    """What torch calls the device ('NVIDIA H200', 'cpu')."""
    import torch

    device = torch.device(device)
    if device.type in ("cpu", "meta"):
        return device.type
    module = torch.get_device_module(device.type)
    index = device.index if device.index is not None else module.current_device()
    return str(module.get_device_name(index))


def detect(device: Any) -> HardwareProfile | None:
    """The profile of a torch device; None for CPU (no accelerator to profile)."""
    import torch

    from accelport.kernels.registry import vendor_key

    device = torch.device(device)
    if device.type in ("cpu", "meta"):
        return None
    name = device_name(device)
    found = match_name(name)
    if found is not None:
        return found
    vendor = vendor_key(device.type)
    if vendor is None:
        return None
    cores = 0
    try:
        props = torch.get_device_module(device.type).get_device_properties(device.index or 0)
        cores = int(getattr(props, "multi_processor_count", 0))
    except (AttributeError, RuntimeError):
        pass
    log.info("no hardware profile matches %r; using the generic %s profile", name, vendor)
    return generic(vendor, name, cores)


def vector_cores(device: Any, hw: HardwareProfile) -> int:
    """How many programs a core-bound grid (Ascend) should launch on `device`.

    On an NPU, triton-ascend's driver reports the vector cores; elsewhere (the
    interpreter on CPU) the profile's count stands in.
    """
    import torch

    if torch.device(device).type == "npu":
        try:
            import triton

            props = triton.runtime.driver.active.utils.get_device_properties(torch.device(device).index or 0)
            return int(props["num_vectorcore"])
        except (ImportError, AttributeError, KeyError, RuntimeError, TypeError) as exc:
            log.info("cannot read vector cores from the driver (%s); using the profile's %d", exc, hw.cores)
    return max(hw.cores, 1)
