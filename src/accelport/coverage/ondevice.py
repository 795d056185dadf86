"""On the target machine: classify each traced operator with the live dispatcher, and optionally run it once.

The backend's adapter (torch_npu, torch_mlu, ...) is imported so its kernels are registered;
each operator's line for the backend's dispatch key then says kernel, math kernel, default
backend kernel or backend fallback. A fallback is flagged: it usually copies the tensors to the
CPU and back without a word. The smoke run executes each operator once per traced dtype
signature with small random inputs of the traced shapes on the device.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

from accelport import knowledge
from accelport.coverage.check import (
    CoverageReport,
    DispatcherSource,
    OpVerdict,
    TargetResult,
    judge,
)
from accelport.coverage.oplists import aten_facts
from accelport.coverage.records import Trace, normalise
from accelport.errors import InvalidValue, ParameterHint, UserError

log = logging.getLogger(__name__)

SMOKE_MAX_ELEMENTS = 1 << 24  # per call, over all tensor arguments: larger traced shapes are skipped, said so


def device_for(vendor: str | None) -> tuple[str, str]:
    """(vendor key, torch device type) for `vendor`, importing its adapter; the current accelerator without one."""
    import torch

    if vendor is None:
        current = torch.accelerator.current_accelerator() if hasattr(torch, "accelerator") else None
        if current is None:
            raise ParameterHint("no accelerator in this process; name the vendor to check (its adapter is imported) or cpu", "vendor")
        profile = knowledge.vendor_for_device(current.type)
        return (profile.key if profile else current.type), current.type
    profile = knowledge.vendor(vendor)
    if profile.adapter_import:
        try:
            importlib.import_module(profile.adapter_import)
        except Exception as exc:
            raise InvalidValue(
                "vendor", vendor, f"cannot import {profile.adapter_import} ({type(exc).__name__}: {exc}); "
                f"install {profile.adapter_package or profile.adapter_import} on this machine, or check offline against the operator lists"
            ) from None
    return vendor, profile.torch_device


def dispatch_key(device_type: str) -> str:
    import torch

    if device_type == torch._C._get_privateuse1_backend_name():
        return "PrivateUse1"
    try:
        return str(torch._C._dispatch_key_for_device(device_type))
    except RuntimeError:
        raise UserError(f"device type {device_type!r} is not known to this torch; is its adapter installed?") from None


def _materialise(torch: Any, sample: tuple, device: Any) -> tuple | str:
    """The sample's meta tensors as random tensors of the same shape and strides on `device`."""
    from torch.utils._pytree import tree_flatten, tree_map

    leaves, _ = tree_flatten(sample)
    elements = sum(t.numel() for t in leaves if isinstance(t, torch.Tensor))
    if elements > SMOKE_MAX_ELEMENTS:
        return f"skipped: traced inputs hold {elements:,} elements (limit {SMOKE_MAX_ELEMENTS:,})"

    def make(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            size = 1 + sum((n - 1) * s for n, s in zip(value.shape, value.stride(), strict=True)) if value.numel() else 0
            if value.dtype.is_floating_point or value.dtype.is_complex:
                base = torch.randn(size, dtype=value.dtype)
            else:
                base = torch.zeros(size, dtype=value.dtype)
            return base.to(device).as_strided(tuple(value.shape), tuple(value.stride()))
        if isinstance(value, torch.device) and value.type == "meta":
            return device
        return value

    return tree_map(make, sample)


def smoke(trace: Trace, verdicts: list[OpVerdict], device_type: str) -> None:
    """Run each judged operator once per traced dtype signature on the device; results land in `verdict.smoke`."""
    import torch

    if trace.probe is None:
        for verdict in verdicts:
            verdict.smoke["-"] = "skipped: no argument samples (the trace was not made in this process)"
        return
    device = torch.device(device_type)
    module = torch.get_device_module(device_type) if device_type not in ("cpu", "meta") else None
    by_op: dict[str, list[tuple[str, tuple]]] = {}
    for (op, dtypes), sample in trace.probe.by_dtype.items():
        by_op.setdefault(normalise(op), []).append((dtypes, sample))
    for verdict in verdicts:
        samples = by_op.get(verdict.op)
        if not samples:
            verdict.smoke["-"] = "skipped: no sample of its arguments (symbolic shapes)"
            continue
        for dtypes, (func, args, kwargs) in samples:
            made = _materialise(torch, (args, kwargs), device)
            if isinstance(made, str):
                verdict.smoke[dtypes] = made
                continue
            try:
                func(*made[0], **made[1])
                if module is not None and hasattr(module, "synchronize"):
                    module.synchronize()
                verdict.smoke[dtypes] = "ok"
            except Exception as exc:  # the point of the run: report what failed, per dtype
                message = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
                verdict.smoke[dtypes] = f"error: {type(exc).__name__}: {message}"


def check_on_device(trace: Trace, vendors: list[str | None], run_smoke: bool = False) -> CoverageReport:
    """Judge the trace with this process's dispatcher for each vendor's device (imports the adapters)."""
    results = []
    facts = aten_facts()
    for vendor in vendors or [None]:
        key_name, device_type = device_for(vendor)
        key = dispatch_key(device_type)
        source = DispatcherSource(key)
        verdicts = judge(trace, source, facts)
        notes = [f"device type {device_type}, dispatch key {key}"]
        if run_smoke:
            smoke(trace, verdicts, device_type)
        results.append(
            TargetResult(
                vendor=key_name,
                label=f"live dispatcher ({key})",
                on_device=True,
                verdicts=verdicts,
                unlisted="backend fallback: the adapter's boxed fallback runs the operator, usually on the CPU",
                notes=notes,
            )
        )
    return CoverageReport(trace, results)
