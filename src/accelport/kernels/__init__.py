"""accelport's portable operator library: Triton kernels with PyTorch references, validation and tuning.

    from accelport import kernels
    y = kernels.get("rms_norm")(x, weight, eps=1e-6)   # dispatches on x.device

`kernels.get(name)` returns an `Operator`; calling it picks the implementation for
the tensors' device (see `accelport.kernels.registry`). Importing this package does
not import torch or triton; each operator module does, when first asked for.
"""

from __future__ import annotations

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

__all__ = ["ENV_VAR", "OPERATOR_NAMES", "Case", "Cost", "Inputs", "KernelError", "Operator", "get", "operators"]
