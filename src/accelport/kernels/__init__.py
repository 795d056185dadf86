"""accelport's portable operator library: Triton kernels with PyTorch references, validation and tuning.

    from accelport import kernels
    y = kernels.get("rms_norm")(x, weight, eps=1e-6)   # dispatches on x.device

`kernels.get(name)` returns an `Operator`; calling it picks the implementation for
the tensors' device (see `accelport.kernels.registry`). Importing this package does
not import torch or triton; each operator module does, when first asked for.

Drop-in, without editing call sites:

    with kernels.enable(device="cuda") as takeover:   # ATen operators through torch.library
        ...
    handle = kernels.patch(model)                      # nn.Module swaps, reversible: handle.undo()
"""

from __future__ import annotations

from typing import Any

from accelport.kernels.registry import (
    ENV_VAR,
    OPERATOR_NAMES,
    Case,
    Cost,
    Inputs,
    KernelError,
    Operator,
    get,
    operators,
)


def enable(ops: Any = None, device: Any = None) -> Any:
    """Run the kernels under PyTorch's own ATen operators for `device`; see `accelport.kernels.aten.enable`."""
    from accelport.kernels import aten

    return aten.enable(ops, device)


def disable() -> None:
    """Remove the ATen overrides of the last `enable()`."""
    from accelport.kernels import aten

    aten.disable()


def patch(model: Any, device: Any = None) -> Any:
    """Swap a model's norm, MLP and attention modules for kernel-backed ones; see `accelport.kernels.patching`."""
    from accelport.kernels import patching

    return patching.patch(model, device)


def unpatch(model: Any) -> None:
    from accelport.kernels import patching

    patching.unpatch(model)


__all__ = [
    "ENV_VAR", "OPERATOR_NAMES", "Case", "Cost", "Inputs", "KernelError", "Operator",
    "disable", "enable", "get", "operators", "patch", "unpatch",
]  # fmt: skip
