"""Facts about this machine and its torch install, gathered without importing vendor adapters."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import sys
from typing import Any

from accelport import __version__, knowledge


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def torch_facts() -> dict[str, Any]:
    """torch version, the current accelerator and the distributed backends, or Nones without torch."""
    facts: dict[str, Any] = {
        "version": None,
        "accelerator": None,
        "device_count": 0,
        "cuda_version": None,
        "hip_version": None,
        "distributed_backends": [],
        "default_backend": None,
    }
    if importlib.util.find_spec("torch") is None:
        return facts
    import torch

    facts["version"] = torch.__version__
    facts["cuda_version"] = getattr(torch.version, "cuda", None)
    facts["hip_version"] = getattr(torch.version, "hip", None)
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and accelerator.is_available():
        current = accelerator.current_accelerator()
        facts["accelerator"] = current.type if current is not None else None
        facts["device_count"] = accelerator.device_count()
    try:
        import torch.distributed as dist

        if dist.is_available():
            checks = {
                "gloo": dist.is_gloo_available,
                "nccl": dist.is_nccl_available,
                "mpi": dist.is_mpi_available,
                "ucc": getattr(dist, "is_ucc_available", lambda: False),
                "xccl": getattr(dist, "is_xccl_available", lambda: False),
            }
            facts["distributed_backends"] = [name for name, check in checks.items() if check()]
            # Vendor adapters register their backends (hccl, mccl, cncl, ...) by name.
            builtin = {"undefined", "fake", *checks}
            for name in getattr(dist.Backend, "backend_list", []):
                if name not in builtin:
                    facts["distributed_backends"].append(name)
            device = facts["accelerator"] or "cpu"
            getter = getattr(dist, "get_default_backend_for_device", None)
            if getter is not None:
                try:
                    facts["default_backend"] = getter(device)
                except (RuntimeError, ValueError):
                    facts["default_backend"] = None
    except ImportError:
        pass
    return facts


def describe_machine() -> dict[str, Any]:
    adapters = {}
    for profile in knowledge.vendors().values():
        name = profile.adapter_package
        if name and name not in adapters:
            version = _version(name) or _version(name.replace("_", "-"))
            if version:
                adapters[name] = version
    visible = {}
    for profile in knowledge.vendors().values():
        for var in profile.visible_devices:
            if var in os.environ:
                visible[var] = os.environ[var]
    return {
        "accelport": __version__,
        "python": sys.version.split()[0],
        "platform": f"{platform.system()} {platform.machine()}",
        "torch": torch_facts(),
        "adapters": adapters,
        "triton": _version("triton"),
        "visible_devices": visible,
    }
