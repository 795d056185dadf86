"""The one door to Triton for accelport kernels: interpreter workarounds, launch recording, availability.

Every kernel module imports `triton` and `tl` from here, never directly, so that
1. a machine without Triton can still import the operator modules and use their
   PyTorch references (the kernels become inert stand-ins that refuse to launch);
2. what the Triton 3.9 interpreter gets wrong is handled in one place (`dot`);
3. launches can be recorded instead of run (`recording()`), which is how the
   ahead-of-time compile check learns the exact signature of every kernel launch.

How Triton picks interpreter mode: `triton.jit` reads `TRITON_INTERPRET` when a
function is *decorated*, and Triton's own standard library (`tl.max`, `tl.sum`,
`tl.sigmoid`, ...) is decorated when `triton` is first imported. One process is
therefore either interpreting or compiling for a GPU, fixed at `import triton`;
`INTERPRETING` records which, from the standard library itself.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

try:
    import triton
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction

    HAVE_TRITON = True
    TRITON_VERSION: str | None = triton.__version__
    # The standard library was decorated at `import triton`: that fixed this process's mode.
    INTERPRETING = isinstance(tl.max, InterpretedFunction)
except ModuleNotFoundError:  # reference-only install: kernels stay defined but inert
    HAVE_TRITON = False
    TRITON_VERSION = None
    INTERPRETING = False

    class _InertKernel:
        """Stands in for a Triton kernel when Triton is not installed."""

        def __init__(self, fn: Any) -> None:
            self.fn = fn
            self.__name__ = fn.__name__

        def __getitem__(self, grid: Any) -> Any:
            raise RuntimeError(f"Triton kernel {self.__name__} cannot run: triton is not installed")

    class _MissingTriton:
        @staticmethod
        def jit(fn: Any = None, **_: Any) -> Any:
            return _InertKernel(fn) if fn is not None else _InertKernel

        @staticmethod
        def cdiv(a: int, b: int) -> int:
            return -(-a // b)

        @staticmethod
        def next_power_of_2(n: int) -> int:
            return 1 << max(n - 1, 0).bit_length()

    class _MissingLanguage:
        constexpr = "constexpr"

    triton = _MissingTriton()  # type: ignore[assignment]
    tl = _MissingLanguage()  # type: ignore[assignment]


# --------------------------------------------------------------------------- device helpers

if INTERPRETING:

    @triton.jit
    def dot(a, b, acc):
        """`acc + a @ b` with fp32 accumulation, exact for fp32 inputs.

        Under the interpreter `tl.dot` multiplies the raw bit patterns of bf16
        operands (triton#11584), so bf16 tiles are widened to fp32 first; fp32
        products there are exact, so the result is what the GPU's bf16 MMA
        (fp32 accumulation) computes.
        """
        if a.dtype == tl.bfloat16:
            return tl.dot(a.to(tl.float32), b.to(tl.float32), acc)
        if a.dtype == tl.float32:
            return tl.dot(a, b, acc, input_precision="ieee")
        return tl.dot(a, b, acc)

else:

    @triton.jit
    def dot(a, b, acc):
        """`acc + a @ b` with fp32 accumulation; fp32 inputs use IEEE products like torch.matmul's default (no TF32)."""
        if a.dtype == tl.float32:
            return tl.dot(a, b, acc, input_precision="ieee")
        return tl.dot(a, b, acc)


# --------------------------------------------------------------------------- launching


@dataclass(frozen=True)
class Launch:
    """One kernel launch as the host code asked for it: kernel, grid, arguments, options."""

    kernel: Any
    grid: tuple[int, ...]
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return getattr(self.kernel, "__name__", repr(self.kernel))


_recording: contextvars.ContextVar[list[Launch] | None] = contextvars.ContextVar("accelport_launches", default=None)


@contextlib.contextmanager
def recording() -> Iterator[list[Launch]]:
    """Record launches instead of running them (host code runs on `meta` tensors meanwhile)."""
    launches: list[Launch] = []
    token = _recording.set(launches)
    try:
        yield launches
    finally:
        _recording.reset(token)


def launch(kernel: Any, grid: Sequence[int], *args: Any, **kwargs: Any) -> None:
    """Launch `kernel` over `grid`; every accelport kernel launch goes through here."""
    launches = _recording.get()
    if launches is not None:
        launches.append(Launch(kernel, tuple(grid), tuple(args), dict(kwargs)))
        return
    kernel[tuple(grid)](*args, **kwargs)


def next_power_of_2(n: int) -> int:
    return int(triton.next_power_of_2(int(n)))


def cdiv(a: int, b: int) -> int:
    return -(-int(a) // int(b))
