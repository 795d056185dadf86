"""The one-pass statistics kernel of `accelport dump` (_stats.c), compiled with the system C compiler at first use.

numpy needs five to seven passes over a tensor for its eight statistics; this kernel
reads each element once. It is built once per machine by `accelport.native` into the
user's cache folder (~/.cache/accelport/native, keyed by a hash of the source, compiler,
flags and CPU) and loaded with ctypes, which releases the GIL during the call. Where torch runs on an
OpenMP runtime (its bundled libgomp, or libiomp5/libomp), the kernel is linked against
that same file, and large tensors are split across torch's intra-op threads. Without a C compiler, or if
building or the self-check fails, `kernels()` returns None and the dump uses numpy:
same statistics, several times slower. ACCELPORT_DUMP_NATIVE=0 (or ACCELPORT_NATIVE=0,
which turns off every compiled helper) forces the numpy path.
"""

from __future__ import annotations

import ctypes
import logging
import math
import os
import struct
from pathlib import Path
from typing import Any

from accelport import native

log = logging.getLogger(__name__)

ENV_VAR = "ACCELPORT_DUMP_NATIVE"
SOURCE = Path(__file__).with_name("_stats.c")
_VERSION = 1
# Tried in order: the first that builds is used (-march=native may be refused by a
# cross compiler, -mprefer-vector-width by a non-x86 one).
_FLAG_SETS = (
    ("-O3", "-march=native", "-mprefer-vector-width=512"),
    ("-O3", "-march=native"),
    ("-O3",),
)
_COMMON = ("-shared", "-fPIC", "-Wno-psabi")

PARALLEL_MIN = 1 << 16  # elements: below this one thread is faster than waking a team


class Kernels:
    """The loaded kernels, by dtype name (float32, float64, bfloat16)."""

    def __init__(self, lib: ctypes.CDLL, path: Path) -> None:
        self.path = path
        self._lib = lib  # keeps the library mapped
        self.by_dtype: dict[str, Any] = {}
        self.strided_by_dtype: dict[str, Any] = {}
        self.parallel_by_dtype: dict[str, Any] = {}
        import torch

        self._threads = torch.get_num_threads
        self.openmp = bool(lib.ap_stats_openmp())  # built against torch's OpenMP runtime
        for dtype, symbol in (("float32", "ap_stats_f32"), ("float64", "ap_stats_f64"),
                              ("bfloat16", "ap_stats_bf16")):  # fmt: skip
            fn = getattr(lib, symbol)
            fn.restype = None
            fn.argtypes = (ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p)
            self.by_dtype[dtype] = fn
            strided = getattr(lib, f"{symbol}_nd")
            strided.restype = None
            strided.argtypes = (ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                ctypes.c_void_p)  # fmt: skip
            self.strided_by_dtype[dtype] = strided
            parallel = getattr(lib, f"{symbol}_par")
            parallel.restype = ctypes.c_int
            parallel.argtypes = (ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int)
            self.parallel_by_dtype[dtype] = parallel

    def sweep(self, pointer: int, count: int, dtype: str, out: Any) -> None:
        """Add the statistics of `count` contiguous elements at `pointer` into out[9].

        A large tensor is split across torch's intra-op threads (the OpenMP team that just
        wrote it, still awake): each thread reads its slice from its own core's cache.
        """
        if count >= PARALLEL_MIN and self.openmp:
            threads = self._threads()
            if threads > 1:
                self.parallel_by_dtype[dtype](pointer, count, out, threads)
                return
        self.by_dtype[dtype](pointer, count, out)

    def sweep_strided(
        self, pointer: int, sizes: list[int], strides: list[int], dtype: str, out: Any
    ) -> None:
        """The same for a strided layout (element strides) whose last dimension has stride 1."""
        ndim = len(sizes)
        self.strided_by_dtype[dtype](
            pointer, ndim, (ctypes.c_int64 * ndim)(*sizes), (ctypes.c_int64 * ndim)(*strides), out
        )


def kernels() -> Kernels | None:
    """The compiled kernels, building them on the first call; None when they are unavailable (numpy is used)."""
    return _once.get()


def reset() -> None:
    """Forget the loaded kernels (tests use it to exercise building and the fallback)."""
    _once.reset()


def _openmp_runtime() -> str | None:
    """The OpenMP runtime torch loaded (its own libgomp, or an Intel/LLVM one), as a file path."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as handle:
            paths = {line.split()[-1] for line in handle if "omp" in line}
    except OSError:
        return None
    for path in sorted(paths):
        name = os.path.basename(path)
        if name.startswith(("libgomp", "libiomp5", "libomp")) and ".so" in name:
            return path
    return None


def _load() -> Kernels:
    import torch  # noqa: F401 - loads the OpenMP runtime the kernel links against

    runtime = _openmp_runtime()
    lib, path = native.load_library("stats", SOURCE, _attempts(runtime), key=(native.cpu_id(), str(runtime)))
    kernels = Kernels(lib, path)
    if lib.ap_stats_version() != _VERSION:
        raise RuntimeError(f"{path}: unexpected kernel version")
    _self_check(kernels)
    return kernels


def _attempts(runtime: str | None) -> list[list[list[str]]]:
    """Build commands, best first: with OpenMP linked against torch's own runtime where it can, else serial.

    The OpenMP build compiles and links in two steps so that the library needs only the
    runtime already in the process (linking with -fopenmp would add the system's libgomp,
    a second thread pool fighting torch's for the same cores).
    """
    attempts = []
    if runtime:
        for flags in _FLAG_SETS:
            attempts.append(
                [
                    [*flags, "-fopenmp", "-fPIC", "-Wno-psabi", "-c", "-o", "{obj}", "{src}"],
                    ["-shared", "-o", "{out}", "{obj}", runtime],
                ]
            )
    attempts += [[[*flags, *_COMMON, "-o", "{out}", "{src}"]] for flags in _FLAG_SETS]
    return attempts


def _self_check(kernels: Kernels) -> None:
    """Refuse a library that gets a small known case wrong (a miscompile, a wrong CPU)."""
    values = [1.5, -2.0, 0.0, 3.0] * 600 + [math.nan, math.inf, -math.inf, 0.0, -0.5]
    finite = [v for v in values if math.isfinite(v)]
    want = [min(finite), max(finite), math.fsum(finite), math.fsum(v * v for v in finite),
            math.fsum(abs(v) for v in finite), 1.0, 2.0, float(finite.count(0.0)), float(len(finite))]  # fmt: skip
    bf16 = [struct.unpack("<I", struct.pack("<f", v))[0] >> 16 for v in values]
    for dtype, ctype, items in (("float32", ctypes.c_float, values),
                                ("float64", ctypes.c_double, values),
                                ("bfloat16", ctypes.c_uint16, bf16)):  # fmt: skip
        data = (ctype * len(items))(*items)
        out = (ctypes.c_double * 9)(math.inf, -math.inf, 0, 0, 0, 0, 0, 0, 0)
        kernels.sweep(ctypes.addressof(data), len(values), dtype, out)
        if list(out) != want:
            raise RuntimeError(f"self-check failed for {dtype}: {list(out)} != {want}")
        parallel = kernels.parallel_by_dtype.get(dtype)
        if parallel is not None:
            out = (ctypes.c_double * 9)(math.inf, -math.inf, 0, 0, 0, 0, 0, 0, 0)
            parallel(ctypes.addressof(data), len(values), out, 2)
            if list(out) != want:
                raise RuntimeError(
                    f"self-check failed for {dtype} on threads: {list(out)} != {want}"
                )


_once: native.Once[Kernels] = native.Once(
    lambda: _load(), log, "dump: compiled statistics unavailable (%s); using numpy", ENV_VAR
)
