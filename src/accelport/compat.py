"""`import accelport.compat`: the helpers migrated code may use where PyTorch has no device-agnostic API.

The implementation lives in `accelport.runtime.compat`; see its docstring and docs/migrate.md.
"""

from accelport.runtime.compat import (
    CpuEvent,
    CpuStream,
    Event,
    backfill,
    current_stream,
    device,
    is_bf16_supported,
    visible_devices_var,
)

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
