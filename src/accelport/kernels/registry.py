"""The operator registry: what an operator is, and which implementation runs for a tensor's device.

An operator has a pure-PyTorch reference (also its CPU path), a generic Triton
implementation, optional per-vendor overrides in their own modules
(`<op>_<vendor>.py`, implementation name `triton-<vendor>`), a config space, a
test matrix and a cost model for benchmarks.

Dispatch: the device type of the first tensor argument picks the implementation
(cpu, meta and mps run the reference; an accelerator runs its vendor's override
if there is one, else the generic Triton kernel). `ACCELPORT_KERNEL_IMPL` forces
one, for every operator (`triton`) or per operator (`rms_norm=reference,gemm=triton`);
a forced implementation that cannot load or run is an error, never a fallback.
This module does not import torch or triton.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from accelport.errors import UserError

log = logging.getLogger(__name__)

ENV_VAR = "ACCELPORT_KERNEL_IMPL"
REFERENCE = "reference"
TRITON = "triton"

OPERATOR_NAMES: tuple[str, ...] = (
    "softmax",
    "log_softmax",
    "rms_norm",
    "layer_norm",
    "add_rms_norm",
    "rope",
    "swiglu",
    "geglu",
    "cross_entropy",
    "gemm",
    "bmm",
    "linear",
    "fused_linear_cross_entropy",
    "flash_attention",
    "block_sparse_attention",
)

# Vendors with a Triton backend (upstream: cuda, rocm; forks: xpu, npu, musa, mlu), the columns of `kernels list`.
TRITON_VENDORS: tuple[str, ...] = ("cuda", "rocm", "xpu", "npu", "musa", "mlu")

# Devices where no Triton backend exists: the reference is the implementation there.
_REFERENCE_DEVICES = frozenset({"cpu", "meta", "mps"})


class KernelError(UserError):
    """An implementation was requested that cannot load or cannot run here."""


@dataclass(frozen=True)
class Case:
    """One entry of an operator's test or benchmark matrix: a label and the sizes it stands for.

    `config` pins kernel configurations, keyed by config name (the operator's
    name, or `<op>_<vendor>` for an override), so a case can exercise a code path
    (a looped row, a ragged tile, a program looping over rows) that the default
    choice would not take.
    """

    label: str
    params: Mapping[str, Any]
    config: Mapping[str, Mapping[str, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class Inputs:
    """Arguments for one call of an operator; `grad` names the tensors whose gradients are checked."""

    args: tuple[Any, ...]
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    grad: tuple[int, ...] = ()


@dataclass(frozen=True)
class Cost:
    """Work one call does: floating-point operations and bytes moved to and from device memory."""

    flops: float
    bytes: float
    bound: str  # "compute" or "memory": which figure the benchmark judges against the peak


@dataclass(frozen=True)
class Operator:
    """A portable operator: reference, Triton implementation, overrides, configs, tests, costs."""

    name: str
    summary: str
    reference: Callable[..., Any]
    triton: Callable[..., Any]
    make_inputs: Callable[..., Inputs]
    cases: tuple[Case, ...]  # interpreter matrix: small, ragged, every code path
    device_cases: tuple[Case, ...]  # on-device validation: realistic sizes
    bench_cases: tuple[Case, ...]
    cost: Callable[[Case, Any], Cost]
    torch_op: Callable[..., Any]  # PyTorch's own op, the benchmark's comparison
    config_space: Any  # accelport.kernels.configs.ConfigSpace
    problem: Callable[..., Mapping[str, Any]]  # (case, dtype) -> sizes the config space reads
    dtypes: tuple[str, ...] = ("float32", "float16", "bfloat16")
    backward: bool = False
    overrides: Mapping[str, str] = field(default_factory=dict)  # vendor -> "module:function"
    tolerances: Mapping[str, tuple[float, float]] = field(default_factory=dict)  # dtype -> (atol, rtol)
    # Inputs -> the Inputs torch_op is timed on, built once outside the timed call (a dense mask from a
    # sparse layout), so the benchmark compares the ops, not the conversion; None: the same inputs.
    torch_inputs: Callable[[Inputs], Inputs] | None = None
    # How training gets gradients when there is no backward kernel (`backward` False); None: it does not.
    backward_fallback: str | None = None

    @property
    def implementations(self) -> tuple[str, ...]:
        return (REFERENCE, TRITON, *(f"{TRITON}-{vendor}" for vendor in sorted(self.overrides)))

    def implementation(self, name: str, *, forced: bool = True) -> Callable[..., Any]:
        """The callable for implementation `name`; KernelError if it is unknown or cannot load."""
        if name == REFERENCE:
            return self.reference
        if name not in self.implementations:
            raise KernelError(
                f"{self.name}: no implementation {name!r}; choose one of {', '.join(self.implementations)}"
            )
        from accelport.kernels import tl_compat

        if not tl_compat.HAVE_TRITON:
            raise KernelError(
                f"{self.name}: implementation {name!r} needs triton, which is not installed; "
                "install it with `pip install 'accelport[kernels]'`"
                + (f" or unset {ENV_VAR}" if forced else "")
            )
        if name == TRITON:
            return self.triton
        target = self.overrides[name.removeprefix(f"{TRITON}-")]
        module_name, _, attribute = target.partition(":")
        try:
            return getattr(importlib.import_module(module_name), attribute)
        except (ImportError, AttributeError) as exc:
            raise KernelError(f"{self.name}: implementation {name!r} cannot load ({exc}); fix {module_name} or choose another") from None

    def vendor_status(self, vendor: str) -> tuple[str, str]:
        """(forward, backward) on `vendor`'s devices: the implementation dispatch runs, and what gives gradients.

        A vendor override replaces the forward; the backward stays the generic Triton kernel
        (launched with the vendor's grid rules), so it reads `triton`.
        """
        forward = f"{TRITON}-{vendor}" if vendor in self.overrides else TRITON
        if self.backward:
            return forward, TRITON
        return forward, self.backward_fallback or "none"

    def select(self, device_type: str) -> tuple[str, bool]:
        """The implementation to run on `device_type`, and whether it was forced by ACCELPORT_KERNEL_IMPL."""
        forced = forced_implementation(self.name)
        if forced is not None:
            return forced, True
        if device_type in _REFERENCE_DEVICES:
            return REFERENCE, False
        vendor = vendor_key(device_type)
        if vendor in self.overrides:
            return f"{TRITON}-{vendor}", False
        return TRITON, False

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        device_type = _device_type(args)
        name, forced = self.select(device_type)
        try:
            fn = self.implementation(name, forced=forced)
        except KernelError:
            if forced:
                raise
            log.warning("%s: Triton implementation unavailable on %s; running the PyTorch reference", self.name, device_type)
            name, fn = REFERENCE, self.reference
        if name != REFERENCE:
            check_runnable(self.name, name, device_type)
        return fn(*args, **kwargs)


def _device_type(args: Sequence[Any]) -> str:
    for arg in args:
        device = getattr(arg, "device", None)
        if device is not None and hasattr(arg, "dtype"):
            return str(device.type)
    return "cpu"


def vendor_key(device_type: str) -> str | None:
    """The vendor profile key for a torch device type (`cuda` is ROCm on a HIP build of torch)."""
    if device_type == "cuda":
        torch = sys.modules.get("torch")
        return "rocm" if torch is not None and getattr(torch.version, "hip", None) else "cuda"
    from accelport import knowledge

    profile = knowledge.vendor_for_device(device_type)
    return profile.key if profile else None


def check_runnable(op: str, implementation: str, device_type: str) -> None:
    """Raise KernelError when a Triton implementation cannot run on tensors of `device_type` in this process."""
    from accelport.kernels import tl_compat

    if device_type == "cpu" and not tl_compat.INTERPRETING:
        raise KernelError(
            f"{op}: {implementation} on CPU tensors needs the Triton interpreter; "
            "set TRITON_INTERPRET=1 before Python imports triton, or use the reference"
        )
    if device_type != "cpu" and tl_compat.INTERPRETING:
        raise KernelError(
            f"{op}: this process runs Triton in interpreter mode (TRITON_INTERPRET=1), "
            f"which only takes CPU tensors; unset TRITON_INTERPRET to run on {device_type}"
        )


def parse_forced(value: str) -> dict[str, str]:
    """Parse ACCELPORT_KERNEL_IMPL: `IMPL` for every operator, or `OP=IMPL,...`; '*' keys the default."""
    forced: dict[str, str] = {}
    for part in (p.strip() for p in value.split(",")):
        if not part:
            continue
        op, sep, impl = part.partition("=")
        if not sep:
            op, impl = "*", op
        op, impl = op.strip(), impl.strip()
        if op != "*" and op not in OPERATOR_NAMES:
            raise KernelError(f"{ENV_VAR}: unknown operator {op!r}; operators: {', '.join(OPERATOR_NAMES)}")
        if not impl:
            raise KernelError(f"{ENV_VAR}: {part!r} names no implementation; write OP=IMPL, e.g. rms_norm=triton")
        forced[op] = impl
    return forced


def forced_implementation(op: str) -> str | None:
    value = os.environ.get(ENV_VAR, "").strip()
    if not value or value == "auto":
        return None
    forced = parse_forced(value)
    impl = forced.get(op, forced.get("*"))
    return None if impl == "auto" else impl


def get(name: str) -> Operator:
    """The operator called `name`; a UserError lists the known ones."""
    if name not in OPERATOR_NAMES:
        raise UserError(f"unknown operator {name!r}; operators: {', '.join(OPERATOR_NAMES)}")
    return importlib.import_module(f"accelport.kernels.{name}").OPERATOR


def operators(names: Sequence[str] | None = None) -> list[Operator]:
    return [get(name) for name in (names or OPERATOR_NAMES)]


def use_interpreter() -> None:
    """Make this process run Triton kernels on CPU tensors: set TRITON_INTERPRET=1 before triton is imported.

    Raises KernelError when triton was already imported in compiled (GPU) mode,
    since its standard library cannot be switched afterwards.
    """
    if "triton" not in sys.modules:
        os.environ["TRITON_INTERPRET"] = "1"
        return
    from accelport.kernels import tl_compat

    if tl_compat.HAVE_TRITON and not tl_compat.INTERPRETING:
        raise KernelError(
            "triton was imported in GPU mode before TRITON_INTERPRET=1 was set; "
            "run again with TRITON_INTERPRET=1 in the environment"
        )
