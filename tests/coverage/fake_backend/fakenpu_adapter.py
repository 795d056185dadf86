"""A fake accelerator adapter, imported the way accelport imports torch_npu: PrivateUse1 renamed to
`fakenpu`, a device module, kernels for a few operators, and (on request) a boxed fallback.

The kernels are never run: the tests only ask the dispatcher what is registered.
"""

import types

import torch

torch.utils.rename_privateuse1_backend("fakenpu")
_module = types.ModuleType("torch.fakenpu")
_module.is_available = lambda: True
_module.device_count = lambda: 1
_module.current_device = lambda: 0
_module.synchronize = lambda device=None: None
torch._register_device_module("fakenpu", _module)

KERNELS = ("mm", "addmm", "embedding", "native_layer_norm", "gelu.out", "view", "t", "transpose.int")


def _not_for_running(*args, **kwargs):
    raise RuntimeError("fakenpu kernels exist for dispatcher tests only")


_kernels = torch.library.Library("aten", "IMPL")
for _op in KERNELS:
    _kernels.impl(_op, _not_for_running, "PrivateUse1")

_fallback = None


def enable_fallback():
    """What adapters with a CPU fallback do: one boxed kernel for every operator without its own."""
    global _fallback
    _fallback = torch.library.Library("_", "IMPL")
    _fallback.fallback(_not_for_running, dispatch_key="PrivateUse1")
