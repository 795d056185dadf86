"""Helpers migrated code may import where PyTorch has no device-agnostic API (`import accelport.compat`).

Everything else `accelport migrate` writes is plain PyTorch (torch.accelerator, torch.amp,
torch.Stream, torch.get_device_module). These fill the gaps, and each behaves on CPU:

- `device()`: the current accelerator, or the CPU when there is none.
- `visible_devices_var()`: the environment variable that restricts visible devices for the
  current vendor (`ASCEND_RT_VISIBLE_DEVICES` on Ascend, `ZE_AFFINITY_MASK` on Intel, ...).
- `is_bf16_supported(device)`: bfloat16 support without the torch.cuda-only function.
- `Event(device, enable_timing=...)`: a torch.Event on accelerators; on the CPU, where
  torch.Event cannot even be recorded, an event that times with `time.perf_counter`.
- `current_stream(device=None)`: torch.accelerator.current_stream on accelerators; on the CPU,
  where torch.accelerator raises and a CPU torch.Stream cannot wait on another stream, a
  stream whose waits and synchronizations return at once (CPU work is synchronous).

And for a torch older than the APIs migrate writes: `backfill()` gives torch < 2.6 a
`torch.accelerator` (and `torch.distributed.get_default_backend_for_device`) built on
the device's own module; call it once before the migrated modules are imported.
"""

from __future__ import annotations

import time
from typing import Any

__all__ = [
    "CpuEvent",
    "CpuStream",
    "Event",
    "backfill",
    "current_stream",
    "device",
    "is_bf16_supported",
    "visible_devices_var",
]


def device() -> Any:
    """The current accelerator as a torch.device, or torch.device("cpu")."""
    import torch

    return torch.accelerator.current_accelerator() or torch.device("cpu")


def _device_type(value: Any) -> str:
    if value is None:
        return device().type
    if isinstance(value, str):
        return value.split(":")[0]
    return value.type


def visible_devices_var(device_type: str | None = None) -> str:
    """The variable that restricts which devices this process sees, for the current (or given) device type.

    For the CPU, and devices with no such variable (mps), this is CUDA_VISIBLE_DEVICES, so code
    that reads it keeps behaving as it did.
    """
    from accelport import knowledge

    kind = device_type or _device_type(None)
    if kind == "cuda":
        import torch

        vendor = knowledge.vendor("rocm" if getattr(torch.version, "hip", None) else "cuda")
    else:
        vendor = knowledge.vendor_for_device(kind)
    if vendor is None or vendor.visible_devices_var is None:
        return "CUDA_VISIBLE_DEVICES"
    return vendor.visible_devices_var


def is_bf16_supported(device: Any = None, including_emulation: bool = True) -> bool:
    """Can this device compute in bfloat16? True on the CPU (PyTorch's CPU kernels support it)."""
    import torch

    kind = _device_type(device)
    if kind == "cpu":
        return True
    module = torch.get_device_module(kind)
    check = getattr(module, "is_bf16_supported", None)
    if check is not None:
        try:
            return bool(check(including_emulation=including_emulation))
        except TypeError:  # backends whose function takes no arguments
            return bool(check())
    try:
        return torch.bfloat16 in torch.accelerator.get_device_capability(torch.device(kind))["supported_dtypes"]
    except (RuntimeError, KeyError, TypeError):
        return False


class CpuEvent:
    """torch.Event's interface for the CPU: `record()` notes `time.perf_counter()`; CPU work is synchronous."""

    def __init__(self, enable_timing: bool = False) -> None:
        self.enable_timing = enable_timing
        self._recorded_at: float | None = None

    def record(self, stream: Any = None) -> None:
        self._recorded_at = time.perf_counter()

    def synchronize(self) -> None:
        return None

    def wait(self, stream: Any = None) -> None:
        return None

    def query(self) -> bool:
        return True

    def elapsed_time(self, end_event: CpuEvent) -> float:
        """Milliseconds from this event to `end_event`, as torch.Event.elapsed_time reports them."""
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("both events must be created with enable_timing=True")
        if self._recorded_at is None or end_event._recorded_at is None:
            raise RuntimeError("both events must be recorded before calculating elapsed time")
        return (end_event._recorded_at - self._recorded_at) * 1000.0

    def __repr__(self) -> str:
        return f"CpuEvent(enable_timing={self.enable_timing})"


def Event(device: Any = None, *, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> Any:
    """A torch.Event for `device` (default: the current accelerator); a CpuEvent on the CPU."""
    import torch

    target = torch.device(device) if device is not None else globals()["device"]()
    if target.type == "cpu":
        return CpuEvent(enable_timing=enable_timing)
    return torch.Event(target, enable_timing=enable_timing, blocking=blocking, interprocess=interprocess)


class CpuStream:
    """The current stream's interface for the CPU: CPU work runs in order, so waiting returns at once."""

    device_type = "cpu"
    device_index = -1

    @property
    def device(self) -> Any:
        import torch

        return torch.device("cpu")

    def wait_stream(self, stream: Any) -> None:
        return None

    def wait_event(self, event: Any) -> None:
        return None

    def record_event(self, event: Any = None) -> CpuEvent:
        event = event if event is not None else CpuEvent()
        event.record(self)
        return event

    def synchronize(self) -> None:
        return None

    def query(self) -> bool:
        return True

    def __enter__(self) -> CpuStream:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def __repr__(self) -> str:
        return "CpuStream()"


def current_stream(device: Any = None) -> Any:
    """torch.accelerator.current_stream(device) on an accelerator; a CpuStream without one (or for a CPU device)."""
    import torch

    if not torch.accelerator.is_available():
        return CpuStream()
    if device is not None and not isinstance(device, int) and _device_type(device) == "cpu":
        return CpuStream()
    return torch.accelerator.current_stream(device)


# The device types an older torch may have, most specific first; the first available one is used.
_LEGACY_DEVICES = ("cuda", "xpu", "npu", "mlu", "musa", "mps")
_ACCELERATOR_FUNCTIONS = (
    "device_count", "current_device_index", "set_device_index", "synchronize", "current_stream", "set_stream",
    "empty_cache", "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
    "memory_stats", "reset_peak_memory_stats", "get_memory_info",
)
# torch.accelerator name -> the device module's name for it.
_MODULE_NAMES = {"current_device_index": "current_device", "set_device_index": "set_device", "get_memory_info": "mem_get_info"}


def accelerator_backfill(torch: Any) -> Any:
    """A stand-in for `torch.accelerator` on a torch that lacks it, with torch 2.13's behaviour:
    without an accelerator `is_available()` is False, `current_accelerator()` None, `device_count()`
    0, and the other functions raise RuntimeError."""
    import types

    kind = next((k for k in _LEGACY_DEVICES if getattr(getattr(torch, k, None), "is_available", lambda: False)()), None)
    module = getattr(torch, kind) if kind else None
    namespace = types.ModuleType("torch.accelerator")
    namespace.is_available = lambda: kind is not None
    namespace.current_accelerator = lambda check_available=False: torch.device(kind) if kind else None

    def through_module(name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            if module is None:
                raise RuntimeError("Cannot access accelerator device when none is available.")
            return getattr(module, _MODULE_NAMES.get(name, name))(*args, **kwargs)

        call.__name__ = name
        return call

    for name in _ACCELERATOR_FUNCTIONS:
        setattr(namespace, name, through_module(name))
    namespace.device_count = lambda: module.device_count() if module is not None else 0

    class device_index:
        def __init__(self, index: int | None) -> None:
            self.index, self.previous = index, None

        def __enter__(self) -> None:
            if self.index is not None:
                self.previous = namespace.current_device_index()
                namespace.set_device_index(self.index)

        def __exit__(self, *exc: Any) -> None:
            if self.previous is not None:
                namespace.set_device_index(self.previous)

    namespace.device_index = device_index
    return namespace


def backfill() -> list[str]:
    """Give an older torch the APIs migrated code calls; returns what was added (nothing on torch >= 2.6)."""
    import torch

    added = []
    if not hasattr(torch, "accelerator"):
        torch.accelerator = accelerator_backfill(torch)
        added.append("torch.accelerator")
    dist = getattr(torch, "distributed", None)
    if dist is not None and dist.is_available() and not hasattr(dist, "get_default_backend_for_device"):
        from accelport import knowledge

        def get_default_backend_for_device(device: Any) -> str:
            vendor = knowledge.vendor_for_device(_device_type(device))
            return vendor.distributed_backend if vendor is not None else "gloo"

        dist.get_default_backend_for_device = get_default_backend_for_device
        added.append("torch.distributed.get_default_backend_for_device")
    return added
