"""Capture what a PyTorch run computes: every ATen op, parameter and input, as statistics or full tensors.

    with accelport.verify.capture("runs/cuda", tensors=False) as cap:
        for batch in data:
            train_step(batch)        # optimizer.step() ends a step; or call cap.step()

Ops are seen at the ATen level through a TorchDispatchMode (so in-place,
functional and fused ops all show up, forward and backward), and attributed to
modules through global module hooks (forward) and autograd's node numbers (backward).
Every record has a stable identity: step, phase, module path, op, call index,
and the user-code line that issued it.

Statistics are computed where the tensor lives. On the CPU they are read
directly, in place, by a compiled one-pass kernel (native.py, _stats.c: float32 lane
sums added into float64 per 2048 elements) or, without a C compiler, by numpy sweeps
over cache-sized chunks; on an accelerator each tensor's numbers are stacked into one small
device tensor and the whole batch is copied to the host once per flush (at the
end of each step, or every `flush_every` tensors), never with a per-tensor
`.item()`.
"""

from __future__ import annotations

import bisect
import datetime as _dt
import fnmatch
import functools
import logging
import math
import os
import sys
import threading
import weakref
import zlib
from collections.abc import Callable, Iterable, Sequence
from ctypes import c_double as _C_DOUBLE
from pathlib import Path
from typing import Any

from accelport.errors import UserError
from accelport.verify.numerics import dumpfile, native

log = logging.getLogger(__name__)

# Ops whose output holds the same elements as their first input: the output reuses the
# input's statistics instead of reading the tensor again. The first set also keeps the
# logical element order, so with full tensors the saved data is shared too.
_SAME_ORDER_OPS = frozenset(
    {
        "aten.view.default", "aten._unsafe_view.default", "aten.reshape.default", "aten.unsqueeze.default",
        "aten.squeeze.dim", "aten.squeeze.default", "aten.squeeze.dims", "aten.detach.default",
        "aten.alias.default", "aten.clone.default", "aten.contiguous.default", "aten.flatten.using_ints",
        "aten.lift_fresh.default", "aten.view_as.default", "aten._reshape_alias.default",
    }
)  # fmt: skip
_ALIAS_OPS = _SAME_ORDER_OPS | {"aten.t.default", "aten.transpose.int", "aten.permute.default"}
# Ops that only look at their input another way (no data moves, no value changes): unless
# asked to (views=True), they are not recorded; their output is listed where it is used,
# with the statistics and the producing record (src) of the tensor it views. A view can
# never be where two runs first diverge, and these are most of a training step's ops
# (about 60% of a transformer's), each paying the Python of a record. They are the
# aliasing ops that copy nothing, and expand.
_COPY_OPS = frozenset({"aten.clone.default", "aten.contiguous.default", "aten.lift_fresh.default"})
_VIEW_OPS = (_ALIAS_OPS - _COPY_OPS) | {"aten.expand.default"}
# Ops whose output is uninitialised memory: recorded without statistics.
_UNINITIALISED_PREFIXES = ("aten.empty", "aten.new_empty")
# Dispatcher calls that compute nothing (profiler ranges such as the optimizer's record_function).
_NOT_NUMERIC = ("profiler.",)
_NOT_RUN = object()  # _record_op: the op is still to run

PHASES = ("forward", "backward", "optimizer", "other")
_CACHE_PRUNE = 4096  # cache entries before dead tensors' entries are dropped
_MARKS_KEPT = 1 << 20  # module marks kept when no step ever ends (see Capture._mark)
# Captures started in this process: a child forked from it (a DataLoader worker) records nothing.
_CAPTURES: weakref.WeakSet = weakref.WeakSet()
# Captures recording now, innermost last: the one a random op's callable reports to.
_RECORDING: list[Any] = []


def _after_fork_in_child() -> None:
    for cap in list(_CAPTURES):
        cap._live = False
        cap._forked = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
_HOST_CHUNK = 1 << 16  # elements per statistics sweep on the CPU: 256 KiB of float32 stays in L2
_SPLIT = 8 * _HOST_CHUNK  # tensors this large are swept by two threads
_DTYPE_NAMES: dict[Any, str] = {}  # torch.float32 -> "float32"
_SWEEP_START = (math.inf, -math.inf, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)  # min, max, sums, counts
_SWEEP_ARRAY = _C_DOUBLE * 9
STATS_KERNEL_VAR = "ACCELPORT_DUMP_STATS_KERNEL"
_SWEEP_START_BYTES = bytes(_SWEEP_ARRAY(*_SWEEP_START))  # copied into a new array per tensor: fast


def parse_steps(steps: str | tuple[int, int] | range | None) -> tuple[int, int | None]:
    if steps is None:
        return 0, None
    if isinstance(steps, range):
        return steps.start, steps.stop - 1
    if isinstance(steps, tuple):
        return int(steps[0]), None if steps[1] is None else int(steps[1])
    text = str(steps).strip()
    try:
        if ".." in text:
            low, high = text.split("..", 1)
            return int(low or 0), int(high) if high else None
        return int(text), int(text)
    except ValueError:
        raise UserError(f"--steps {text}: not a step range; write N, N..M or N..") from None


class _Stats:
    """Statistics of tensors, computed on their own device; see STAT_FIELDS for the order."""

    def __init__(self, host: bool) -> None:
        import torch

        self.torch = torch
        self.host = host  # CPU tensors: read the numbers right away (no device to synchronise)
        # (device vector of sums, element count), or (fused batch, element count, slot): waiting for one copy
        self.pending: list[tuple] = []
        # The fused Triton kernel (stats_kernel.py) per device: "auto" on a GPU Triton compiles for,
        # "torch" never, "triton" wherever it can run (the CPU under TRITON_INTERPRET=1: tests).
        self.kernel_mode = os.environ.get(STATS_KERNEL_VAR, "auto")
        self._batches: dict[Any, Any] = {}
        self._buffers: dict[tuple, Any] = {}  # scratch arrays, per thread
        self._pool: Any = None  # second thread for large tensors
        # The compiled one-pass kernel (native.py); None: numpy sweeps, same numbers, slower.
        self.native = native.kernels() if host else None
        self._native_dtypes: dict[Any, str] = {}
        self._native_torch: dict[Any, str] = {}
        if self.native is not None:
            import numpy as np

            # int16 arrays reach a sweep only as the bits of bfloat16 tensors (see compute).
            torch = self.torch
            self._native_torch = {torch.float32: "float32", torch.float64: "float64",
                                  torch.bfloat16: "bfloat16"}  # fmt: skip
            self._f64 = np.dtype(np.float64)
            self._native_dtypes = {np.dtype(np.float32): "float32", np.dtype(np.float64): "float64",
                                   np.dtype(np.int16): "bfloat16"}  # fmt: skip

    def compute(self, t: Any) -> list[float] | int | None:
        """A list of numbers (host) or an index into the pending batch (device); None when not numeric."""
        torch = self.torch
        if self.native is not None and t.is_cpu:
            # (float32, float64 and bfloat16 are never quantized.)
            kind = self._native_torch.get(t.dtype)
            if kind is not None and t.layout == torch.strided:
                n = t.numel()
                if n and t.is_contiguous():  # most tensors: no layout to work out
                    out = _SWEEP_ARRAY.from_buffer_copy(_SWEEP_START_BYTES)
                    self.native.sweep(t.data_ptr(), n, kind, out)
                    return _finish(out)
                stats = self._native_stats(t, kind)
                if stats is not None:
                    return stats
        x = t.detach()
        if x.is_complex() or x.layout != torch.strided or x.is_meta or x.is_quantized:
            return None
        n = x.numel()
        if n == 0:
            return [math.nan, math.nan, math.nan, 0.0, math.nan, 0.0, 0.0, 0.0]
        host = self.host and x.is_cpu
        if not host:
            batch = self._batch(x.device)
            if batch is not None:
                with torch._C._DisableTorchDispatch():
                    flat = x.reshape(-1)
                    if batch.accepts(flat):
                        self.pending.append((batch, n, batch.add(flat)))
                        return len(self.pending) - 1
        if x.dtype == torch.bool:
            if host:
                ones = int(torch.count_nonzero(x))
                low, high = (1.0 if ones == n else 0.0), (1.0 if ones else 0.0)
                return [low, high, ones / n, math.sqrt(ones), ones / n, 0.0, 0.0, float(n - ones)]
            x = x.to(torch.uint8)
        if host and x.dtype == torch.bfloat16 and self.native is not None:
            x = x.view(torch.int16)  # the kernel widens bfloat16 itself: no float32 copy
        elif not x.is_floating_point():
            x = x.double()
        elif x.dtype not in (torch.float32, torch.float64):
            x = x.float()
        if host:
            # Statistics do not depend on element order: a transposed or permuted tensor that
            # fills its memory exactly is read in place; any other layout (a slice with gaps,
            # such as the q/k/v parts of a split) is copied slab by slab into a buffer that
            # stays in cache, never into a whole new tensor.
            if x.is_contiguous():
                return self._host(x.numpy().reshape(-1))
            dense = _dense_view(x)
            if dense is not None:
                return self._host(dense.numpy())
            return _combine(self._sweep_strided(x.numpy()))
        return self._device(x.reshape(-1), n)

    def _native_stats(self, t: Any, kind: str) -> list[float] | None:
        """Statistics from the compiled kernel, read from the tensor's memory in place.

        No torch op is called (each would pass through the dispatch mode again): the
        kernel gets the data pointer, and the layout is worked out from sizes and strides.
        None for a layout it cannot walk (no dimension with stride 1).
        """
        n = t.numel()
        if n == 0:
            return [math.nan, math.nan, math.nan, 0.0, math.nan, 0.0, 0.0, 0.0]
        assert self.native is not None
        out = _SWEEP_ARRAY.from_buffer_copy(_SWEEP_START_BYTES)
        if t.is_contiguous():
            self.native.sweep(t.data_ptr(), n, kind, out)
            return _finish(out)
        # Element order does not matter: sort the dimensions by stride, merge the ones that
        # follow each other in memory; a layout that fills its memory becomes one run.
        dims = sorted((st, sz) for st, sz in zip(t.stride(), t.shape, strict=True) if sz != 1)
        merged: list[list[int]] = []
        for stride, size in dims:
            if merged and merged[-1][0] * merged[-1][1] == stride:
                merged[-1][1] *= size
            else:
                merged.append([stride, size])
        if not merged or merged[0][0] != 1:
            return None
        if len(merged) == 1:
            self.native.sweep(t.data_ptr(), n, kind, out)
        else:
            merged.reverse()  # outermost first, the contiguous run last
            sizes = [size for _, size in merged]
            strides = [stride for stride, _ in merged]
            self.native.sweep_strided(t.data_ptr(), sizes, strides, kind, out)
        return _finish(out)

    def _host(self, values: Any) -> list[float]:
        """One sweep of a 1-D array over cache-sized chunks (compiled kernel, else numpy).

        Many small reductions through torch's thread pool stall whenever the other cores are
        busy (each parallel region waits for every thread); reductions on a chunk that stays
        in cache cost a few microseconds each and never wait. With numpy, a large tensor is
        split in two halves swept on two threads (numpy releases the GIL).
        """
        n = values.shape[0]
        # The compiled kernel runs on one thread: a second one only contends with torch's
        # own threads, which keep spinning on the other cores between ops.
        if n < _SPLIT or self.native is not None:
            return _finish(self._sweep(values))
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="accelport-stats")
        half = (n // 2 // _HOST_CHUNK) * _HOST_CHUNK
        other = self._pool.submit(self._sweep, values[half:])
        return _combine([self._sweep(values[:half]), other.result()])

    def _sweep_strided(self, values: Any) -> list[tuple]:
        """Sweeps of a non-contiguous array, copied a few rows of its first dimension at a time."""
        import numpy as np

        row = values[0].size if values.ndim > 1 else 1
        rows_per_slab = max(1, _HOST_CHUNK // max(1, row))
        buffer = self._buffer("slab", values.dtype, min(values.size, rows_per_slab * row))
        parts = []
        for begin in range(0, values.shape[0], rows_per_slab):
            slab = values[begin : begin + rows_per_slab]
            dense = buffer[: slab.size]
            np.copyto(dense.reshape(slab.shape), slab)
            parts.append(self._sweep(dense))
        return parts

    def _sweep(self, values: Any) -> tuple:
        """(min, max, sum, sum of squares, sum of |x|, nan, inf, zeros, finite count) of a 1-D array."""
        kind = self._native_dtypes.get(values.dtype)
        if kind is None:
            return self._sweep_numpy(values)
        out = self._buffer("out", self._f64, 9)
        out[:] = _SWEEP_START
        assert self.native is not None
        self.native.sweep(values.ctypes.data, values.shape[0], kind, out.ctypes.data)
        return tuple(out.tolist())

    def _sweep_numpy(self, values: Any) -> tuple:
        """What `_sweep` returns, with numpy (no compiled kernel).

        Each chunk costs a handful of numpy calls: sum (a dot with ones), min, max and sum of
        squares; |x| only when the chunk has both signs (otherwise the sum of |x| is +-sum),
        and the zeros are counted only when the chunk spans zero and its smallest |x| is 0.
        """
        import numpy as np

        n = values.shape[0]
        chunk = _HOST_CHUNK
        size = min(n, chunk)
        scratch = self._buffer("scratch", values.dtype, size)
        ones = self._ones(values.dtype, size)
        flags = self._buffer("flags", np.dtype(bool), size)
        dot, minimum, maximum = np.dot, np.minimum.reduce, np.maximum.reduce
        isfinite = math.isfinite
        lo, hi = math.inf, -math.inf
        total = square = absolute = 0.0
        zero = nan = inf = finite = 0
        with np.errstate(over="ignore", invalid="ignore"):
            for begin in range(0, n, chunk):
                part = values[begin : begin + chunk]
                m = part.shape[0]
                if m != size:
                    scratch, ones, flags = scratch[:m], ones[:m], flags[:m]
                    size = m
                part_sum = float(dot(part, ones))
                if not isfinite(part_sum):
                    # Rare: NaN/Inf in this chunk (or a float32 sum that overflowed).
                    counts = self._non_finite(part)
                    nan += counts[0]
                    inf += counts[1]
                    finite += counts[2]
                    if counts[2]:
                        part_lo, part_hi = counts[3], counts[4]
                        lo, hi = min(lo, part_lo), max(hi, part_hi)
                        total += counts[5]
                        square += counts[6]
                        absolute += counts[7]
                        zero += counts[8]
                    continue
                finite += m
                part_lo, part_hi = float(minimum(part)), float(maximum(part))
                if part_lo < lo:
                    lo = part_lo
                if part_hi > hi:
                    hi = part_hi
                total += part_sum
                part_square = float(dot(part, part))
                if part_lo >= 0.0:
                    part_abs = part_sum
                    has_zero = part_lo == 0.0
                elif part_hi <= 0.0:
                    part_abs = -part_sum
                    has_zero = part_hi == 0.0
                else:
                    magnitude = np.abs(part, out=scratch)
                    part_abs = float(dot(magnitude, ones))
                    has_zero = float(minimum(magnitude)) == 0.0
                if not (isfinite(part_square) and isfinite(part_abs)):
                    # Finite values whose squares overflow float32 (masks filled with finfo.max).
                    wide = part.astype(np.float64)
                    part_square, part_abs = float(dot(wide, wide)), float(np.abs(wide).sum())
                square += part_square
                absolute += part_abs
                if has_zero:
                    zero += int(np.count_nonzero(np.equal(part, 0, out=flags)))
        return lo, hi, total, square, absolute, nan, inf, zero, finite

    @staticmethod
    def _non_finite(part: Any) -> tuple:
        """(nan, inf, finite count, min, max, sum, sum of squares, sum of |x|, zeros) of a chunk with NaN/Inf."""
        import numpy as np

        nan = int(np.count_nonzero(np.isnan(part)))
        inf = int(np.count_nonzero(np.isinf(part)))
        good = part[np.isfinite(part)].astype(np.float64)
        if good.shape[0] == 0:
            return nan, inf, 0, 0.0, 0.0, 0.0, 0.0, 0.0, 0
        return (
            nan,
            inf,
            good.shape[0],
            float(good.min()),
            float(good.max()),
            float(good.sum()),
            float(np.dot(good, good)),
            float(np.abs(good).sum()),
            int(np.count_nonzero(good == 0)),
        )

    def _buffer(self, kind: str, dtype: Any, size: int) -> Any:
        """A scratch array of at least `size` elements, one per kind, dtype and thread."""
        import numpy as np

        key = (kind, dtype.str, threading.get_ident())
        buffer = self._buffers.get(key)
        if buffer is None or buffer.shape[0] < size:
            buffer = self._buffers[key] = np.empty(size, dtype)
        return buffer[:size]

    def _ones(self, dtype: Any, size: int) -> Any:
        import numpy as np

        buffer = self._buffers.get(("ones", dtype.str))
        if buffer is None or buffer.shape[0] < size:
            buffer = self._buffers[("ones", dtype.str)] = np.ones(size, dtype)
        return buffer[:size]

    def _device(self, flat: Any, n: int) -> int:
        """Queue the sums of a device tensor (one small float64 vector, no transfer); its index in the batch.

        Fourteen small kernels and one stack per tensor, launched with the dispatch mode
        out of the way (these ops are accelport's, not the user's); the division and the
        NaN and zero counts are worked out on the host when the batch comes back (resolve).
        """
        torch = self.torch
        with torch._C._DisableTorchDispatch():
            finite = flat.isfinite()
            clean = torch.where(finite, flat, 0.0)
            big = torch.finfo(flat.dtype).max
            vector = torch.stack(  # promoted to float64 by the stack
                [
                    torch.where(finite, flat, big).amin(),
                    torch.where(finite, flat, -big).amax(),
                    clean.sum(dtype=torch.float64),
                    torch.linalg.vector_norm(clean, dtype=torch.float64),
                    torch.linalg.vector_norm(clean, 1, dtype=torch.float64),
                    flat.isinf().sum(),
                    torch.count_nonzero(clean),
                    finite.sum(),
                ]
            )
        self.pending.append((vector, n))
        return len(self.pending) - 1

    def _batch(self, device: Any) -> Any:
        """The fused kernel's batch for this device, or None where the torch ops measure it."""
        if self.kernel_mode == "torch":
            return None
        batch = self._batches.get(device, False)
        if batch is False:
            from accelport.verify.numerics import stats_kernel

            usable = stats_kernel.available(device) if device.type != "cpu" or self.kernel_mode == "triton" else False
            batch = self._batches[device] = stats_kernel.Batch(self.torch, device) if usable else None
        return batch

    def resolve(self) -> list[list[float]]:
        """Copy every pending device vector to the host (one transfer per device) and finish the statistics."""
        by_device: dict[Any, list[int]] = {}
        fused: dict[int, tuple[Any, list[int]]] = {}
        for index, item in enumerate(self.pending):
            if len(item) == 3:
                fused.setdefault(id(item[0]), (item[0], []))[1].append(index)
            else:
                by_device.setdefault(item[0].device, []).append(index)
        rows: list[list[float]] = [[] for _ in self.pending]
        torch = self.torch
        with torch._C._DisableTorchDispatch():
            for batch, indices in fused.values():
                finished = batch.finish()  # stage 2 for the whole batch, one copy
                for i in indices:
                    _batch, n, slot = self.pending[i]
                    rows[i] = _finish_device(finished[slot], n)
            for indices in by_device.values():
                stacked = torch.stack([self.pending[i][0] for i in indices]).to("cpu").tolist()
                for i, row in zip(indices, stacked, strict=True):
                    rows[i] = _finish_device(row, self.pending[i][1])
        self.pending = []
        return rows


def _finish_device(row: list[float], n: int) -> list[float]:
    """The STAT_FIELDS from a device vector (min, max, sum, L2, sum of |x|, Inf count, nonzero finite count, finite count)."""
    lo, hi, total, l2, absolute, inf, nonzero, finite = row
    nan = n - finite - inf
    if finite == 0:
        return [math.nan, math.nan, math.nan, math.nan, math.nan, float(nan), float(inf), 0.0]
    return [lo, hi, total / finite, l2, absolute / finite, float(nan), float(inf), float(finite - nonzero)]


def _finish(sums: Any) -> list[float]:
    """The STAT_FIELDS from one sweep's nine numbers (a ctypes array, list or tuple)."""
    # A slice reads a ctypes array in one call; unpacking it directly reads element by
    # element (about 2.5 us against 0.4 us per tensor).
    lo, hi, total, square, absolute, nan, inf, zero, finite = sums[:]
    if finite == 0:
        return [math.nan, math.nan, math.nan, math.nan, math.nan, float(nan), float(inf), 0.0]
    return [lo, hi, total / finite, math.sqrt(square), absolute / finite, float(nan), float(inf), float(zero)]


def _combine(parts: list[tuple]) -> list[float]:
    """The STAT_FIELDS of a tensor from the sweeps of its pieces."""
    if len(parts) == 1:
        return _finish(parts[0])
    return _finish(
        (min(p[0] for p in parts), max(p[1] for p in parts), *(sum(p[i] for p in parts) for i in range(2, 9)))
    )


class _Entry:
    """One tensor as recorded: dtype, shape, statistics, where its data was saved, who produced it."""

    __slots__ = ("data", "desc", "dtype", "shape", "src", "stats", "uninitialised")

    def __init__(self, dtype: str, shape: list[int], stats: Any, src: int | None) -> None:
        self.uninitialised = False
        self.dtype = dtype
        self.shape = shape
        self.stats = stats  # list of numbers, index into the device batch, or None (not numeric, or uninitialised)
        self.src = src  # seq of the record whose output this is
        self.data: dict[str, Any] | None = None  # {"file", "start", "nbytes"} with full tensors
        # The tensor as a record lists it (no file to save, no checksum to add): built once,
        # shared by every record that lists the tensor; None once `data` changes.
        self.desc: dict[str, Any] | None = None


class Capture:
    """An active dump; use through `capture(...)`."""

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        *,
        tensors: bool = False,
        steps: str | tuple[int, int] | range | None = None,
        modules: Sequence[str] = (),
        ops: Sequence[str] = (),
        tensor_modules: Sequence[str] = (),
        tensor_ops: Sequence[str] = (),
        phases: Iterable[str] = ("forward", "backward", "other"),
        checksums: bool = False,
        param_checksums: bool = True,
        step_on: str = "optimizer",
        flush_every: int = 1024,
        stats_on_host: bool = True,
        lazy: bool = False,
        views: bool = False,
        compiled: bool = True,
    ) -> None:
        self.folder = Path(run_dir)
        self.tensors = tensors
        self.first_step, self.last_step = parse_steps(steps)
        self.module_filters = tuple(modules)
        self.op_filters = tuple(ops)
        self.tensor_module_filters = tuple(tensor_modules)
        self.tensor_op_filters = tuple(tensor_ops)
        self.phases = frozenset(phases)
        unknown = self.phases - set(PHASES)
        if unknown:
            raise UserError(
                f"--phases: unknown phase {sorted(unknown)[0]!r}; choose from {', '.join(PHASES)}"
            )
        if step_on not in ("optimizer", "forward", "manual"):
            raise UserError(f"--step-on {step_on}: choose optimizer, forward or manual")
        self.checksums = checksums
        self.param_checksums = param_checksums
        self.step_on = step_on
        self.flush_every = max(1, flush_every)
        self.stats_on_host = stats_on_host
        self.lazy = lazy  # create the folder at the first record (used by the CLI wrapper)
        self.views = views  # record view ops too (see _VIEW_OPS)
        self.compiled = compiled  # per-op path in C where it can be built (recorder.py)
        self.recorder = ""  # which ran: "compiled" or "python" (set at start)
        self.current_step = 0
        self._live = False  # recording now: started, not closed, this process, a step in range (_set_live)
        self._forked = False  # this is a child forked from the process that started the capture
        self._tensor: Any = None  # torch.Tensor, once started
        self._opened = False
        self._closed = False
        self._manifest: dumpfile.ManifestWriter | None = None
        self._store: dumpfile.TensorStore | None = None
        self._seq = 0
        self._records: list[dict[str, Any]] = []  # waiting for device statistics / the next flush
        self._waiting_tensors = 0
        # id(tensor) -> (weak reference, version, entry). No callback per tensor: an entry
        # whose tensor died is never a hit (the reference no longer gives the tensor back)
        # and is dropped when the cache outgrows _cache_limit.
        self._cache: dict[int, tuple[Any, int, _Entry]] = {}
        self._cache_limit = _CACHE_PRUNE
        self._calls: dict[tuple[str, str, str], int] = {}
        # id(module) -> (weak reference, path); the reference tells a reused id from the module.
        self._module_names: dict[int, tuple[Any, str]] = {}
        self._param_names: dict[int, tuple[str, str]] = {}
        self._entered: set[int] = set()  # modules whose parameters were recorded this step
        self._forward_stack: list[str] = []
        # Backward ops are attributed through autograd's sequence numbers: every node
        # created in forward takes the next one, so the module on top of the forward stack
        # when node N was made is the one marked last at or before N (marks: the number at
        # each module entry and exit; marked: the module from there on). This step's marks
        # and the last one's are kept.
        self._marks: list[int] = []
        self._marked: list[str] = []
        self._marks_before = 0  # where this step's marks begin
        self._node_modules: dict[int, tuple[str, str]] = {}  # sequence number -> (module, node name)
        self._sequence_nr: Callable[[], int] = _no_sequence_nr
        self._call_sites: dict[str, str] = {}  # module path -> line that called it
        self._in_optimizer = 0
        # Frames of the optimizer steps running now (their hook wrappers), innermost last: a
        # step that raised never runs its post-hook, and its frame is then off the stack.
        self._optimizer_frames: list[Any] = []
        self._mode_off = False  # dispatch mode taken off the stack while an optimizer step runs
        self._handles: list[Any] = []
        self._mode: Any = None
        self._frame_cache: dict[Any, bool] = {}
        self._lines: dict[tuple[Any, int], str] = {}  # (code, line number) -> "file:line"
        self._lines_cwd = ""
        # id(func) -> (op name, uninitialised, aliasing, same order, expand, view, callable);
        # None for _NOT_NUMERIC ops. Keyed by id: OpOverload.__hash__ is Python code (op
        # objects live for the process).
        self._op_info: dict[int, tuple[str, bool, bool, bool, bool, bool, Any] | None] = {}
        self._filtered = bool(self.module_filters or self.op_filters)
        self._backward = "backward" in self.phases
        self._unresolved: list[dict[str, Any]] = []  # descriptions waiting for device statistics
        self._stats: _Stats | None = None
        self._library_roots: tuple[str, ...] = ()
        self._stdlib = ""
        self._amp_recorded = -1
        self._busy = False  # True while accelport itself runs torch ops (statistics, RNG state)
        self.records_written = 0
        # seq -> what a random op drew: its generator's state before (CRC-32) and its outputs' bits,
        # joined to the op's record at the flush (records are built in C or Python alike).
        self._random: dict[int, dict[str, Any]] = {}
        self._api_calls: dict[Any, str | None] = {}  # code object -> "torch.x.y.fn" (see _api_call)

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> Capture:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        try:
            import torch
            from torch.utils._python_dispatch import TorchDispatchMode
        except ImportError:
            from accelport.errors import MissingDependency

            raise MissingDependency("torch", "torch", "accelport dump") from None
        self._torch = torch
        self._C = torch._C
        self._tensor = torch.Tensor
        self._sequence_nr = getattr(torch.autograd, "_get_sequence_nr", _no_sequence_nr)
        self._stats = _Stats(self.stats_on_host)
        self._stdlib = str(Path(os.__file__).parent.resolve()) + os.sep
        self._library_roots = (
            str(Path(torch.__file__).parent.resolve()) + os.sep,
            str(Path(__file__).parents[1].resolve()) + os.sep,
            self._stdlib,
        )
        compiled = self._compiled_recorder()
        self.recorder = "compiled" if compiled is not None else "python"
        compiled_on_op = compiled.on_op if compiled is not None else None
        if not self.lazy:
            self._open()
        capture = self

        class _Mode(TorchDispatchMode):
            if compiled is None:

                def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                    return capture._on_op(func, args, kwargs or {})

            else:

                def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                    return compiled_on_op(capture, func, args, kwargs or {})

        _CAPTURES.add(self)
        _RECORDING.append(self)
        self._set_live()
        self._mode = _Mode()
        self._mode.__enter__()
        from torch.nn.modules import module as nn_module

        self._handles.append(nn_module.register_module_forward_pre_hook(self._on_module_enter))
        self._handles.append(
            nn_module.register_module_forward_hook(self._on_module_exit, always_call=True)
        )
        from torch.optim import optimizer as optim

        self._handles.append(optim.register_optimizer_step_pre_hook(self._on_optimizer_pre))
        self._handles.append(optim.register_optimizer_step_post_hook(self._on_optimizer_post))

    def _compiled_recorder(self) -> Any:
        """The C version of _on_op (recorder.py) where it applies: statistics measured on the
        host, no tensors saved, no checksums; None otherwise or where it cannot be built."""
        if self.tensors or self.checksums or not self.stats_on_host or not self.compiled:
            return None
        from accelport.verify.numerics import recorder

        return recorder.load()

    def close(self) -> None:
        """Flush everything, write the end record and stop capturing."""
        if self._closed:
            return
        self._closed = True
        self._live = False
        if self in _RECORDING:
            _RECORDING.remove(self)
        # A mode taken off for an optimizer step that raised is simply not put back.
        self._optimizer_frames = []
        self._in_optimizer = 0
        if self._mode is not None and not self._mode_off:
            try:
                self._mode.__exit__(None, None, None)
            except (
                RuntimeError,
                IndexError,
                AssertionError,
            ):  # the mode stack was left inconsistent by the user
                log.warning("dump: dispatch mode was not on top of the stack at close")
        for handle in self._handles:
            handle.remove()
        self._handles = []
        if self._stats is not None and self._stats._pool is not None:
            self._stats._pool.shutdown()
        if self._forked or not self._opened:
            return
        self._flush()
        assert self._manifest is not None
        # records: lines between the header and this one, so a reader can tell a complete dump.
        self._manifest.write(
            {
                "k": "end",
                "records": self._manifest.records - 1,
                "steps": self.current_step + 1,
                "closed": _now(),
            }
        )
        if self._store is not None:
            self._store.close()
        self._manifest.close()

    def step(self) -> None:
        """End the current step: flush its records and start numbering the next one."""
        if self._forked:
            return
        if self._optimizer_frames:
            self._settle_optimizer()
        if self._opened:
            self._flush()
            if self._store is not None:
                self._store.finish_step()
        self.current_step += 1
        self._set_live()
        self._calls.clear()
        self._entered.clear()
        self._cache.clear()
        self._node_modules.clear()
        del self._marks[: self._marks_before], self._marked[: self._marks_before]
        self._marks_before = len(self._marks)

    # -- opening and writing -----------------------------------------------------------------

    def _open(self) -> None:
        if self._opened:
            return
        self._opened = True
        folder = self.folder
        if folder.exists() and not folder.is_dir():
            raise UserError(f"{folder}: is a file, not a folder; dump into a new folder")
        if folder.exists() and any(p.is_file() for p in folder.iterdir()):
            raise UserError(f"{folder}: folder is not empty; dump into a new folder")
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(f"{folder}: cannot create the dump folder ({exc.strerror or exc}); choose another") from None
        self._manifest = dumpfile.ManifestWriter(folder)
        if self.tensors:
            self._store = dumpfile.TensorStore(folder)
        self._manifest.write(self._header())
        self._manifest.flush()

    def _header(self) -> dict[str, Any]:
        torch = self._torch
        from accelport.runtime.environment import describe_machine

        determinism = {
            "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
            "cudnn_deterministic": bool(torch.backends.cudnn.deterministic),
            "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
            "cuda_matmul_allow_tf32": bool(
                getattr(torch.backends.cuda.matmul, "allow_tf32", False)
            ),
        }
        env_vars = {
            k: v
            for k, v in os.environ.items()
            if k
            in (
                "CUBLAS_WORKSPACE_CONFIG",
                "PYTHONHASHSEED",
                "OMP_NUM_THREADS",
                "RANK",
                "WORLD_SIZE",
                "LOCAL_RANK",
            )
            or k.endswith("_VISIBLE_DEVICES")
        }
        return {
            "k": "header",
            "format": dumpfile.FORMAT,
            "version": dumpfile.VERSION,
            "created": _now(),
            "mode": "tensors" if self.tensors else "statistics",
            "stat_fields": list(dumpfile.STAT_FIELDS),
            "checksums": self.checksums,
            "views": self.views,
            "recorder": self.recorder,
            "steps": [self.first_step, self.last_step],
            "phases": sorted(self.phases),
            "filters": {
                "modules": list(self.module_filters),
                "ops": list(self.op_filters),
                "tensor_modules": list(self.tensor_module_filters),
                "tensor_ops": list(self.tensor_op_filters),
            },
            "argv": list(sys.argv),
            "pid": os.getpid(),
            "machine": describe_machine(),
            "dtype_policy": {"default_dtype": str(torch.get_default_dtype()).replace("torch.", "")},
            "determinism": determinism,
            "seeds": {"torch_initial_seed": torch.initial_seed()},
            "env": env_vars,
        }

    def _emit(self, record: dict[str, Any], tensor_count: int) -> None:
        self._records.append(record)
        self._waiting_tensors += tensor_count
        if self._waiting_tensors >= self.flush_every:
            self._flush()

    def _flush(self) -> None:
        if not self._opened or self._manifest is None:
            return
        assert self._stats is not None
        resolved = self._stats.resolve()
        if resolved:
            # Tensors measured in this batch may be used again after the flush (as inputs,
            # or through views): their cached entries must carry the numbers, not an index
            # into a batch that is about to be emptied.
            for _ref, _version, entry in self._cache.values():
                if isinstance(entry.stats, int):
                    entry.stats = resolved[entry.stats]
        # Host statistics went into their descriptions JSON-ready (_json_stats); device ones
        # are filled in now, in the descriptions that hold their index (each listed once).
        for desc in self._unresolved:
            desc["stats"] = _json_stats(resolved[desc["stats"]])
        self._unresolved = []
        if self._random:
            for record in self._records:
                drawn = self._random.pop(record.get("seq"), None) if record.get("k") == "op" else None
                if drawn is not None:
                    record["random"] = drawn
        self._manifest.write_many(self._records)
        self.records_written += len(self._records)
        self._records = []
        self._waiting_tensors = 0
        if self._store is not None:
            self._store.flush()
        self._manifest.flush()

    # -- what is being recorded now ----------------------------------------------------------

    def _set_live(self) -> None:
        self._live = (
            not self._closed
            and not self._forked
            and self.current_step >= self.first_step
            and (self.last_step is None or self.current_step <= self.last_step)
        )

    def _wanted(self, module: str, op: str) -> bool:
        if self.module_filters and not any(
            fnmatch.fnmatchcase(module, p) for p in self.module_filters
        ):
            return False
        return not (
            self.op_filters and not any(fnmatch.fnmatchcase(op, p) for p in self.op_filters)
        )

    def _save_tensors_of(self, module: str, op: str) -> bool:
        if not self.tensors:
            return False
        if self.tensor_module_filters and not any(
            fnmatch.fnmatchcase(module, p) for p in self.tensor_module_filters
        ):
            return False
        return not (
            self.tensor_op_filters
            and not any(fnmatch.fnmatchcase(op, p) for p in self.tensor_op_filters)
        )

    def _user_line(self) -> str | None:
        """file:line of the innermost frame outside torch, accelport and the standard library."""
        frame = sys._getframe(2)
        cache = self._frame_cache
        while frame is not None:
            code = frame.f_code
            library = cache.get(code)
            if library is None:
                library = self._library_code(code)
            if not library:
                # Built once per code location (the path is relative to the working
                # directory: a chdir starts the table again).
                cwd = os.getcwd()
                if cwd != self._lines_cwd:
                    self._lines_cwd = cwd
                    self._lines.clear()
                where = (code, frame.f_lineno)
                line = self._lines.get(where)
                if line is None:
                    line = self._line_text(code, where[1])
                return line
            frame = frame.f_back
        return None

    def _run_random(self, call: Any, args: tuple, kwargs: dict) -> Any:
        """Run a random op (inside its record: `_seq` already counts it), noting what it drew.

        Its outputs are compared bit for bit, not by statistics: two dropout masks with the
        same rate have almost the same mean and norm, and the runs would seem to part only
        at the op after it. The generator's state before the op tells a different random
        stream (another seed, another device's generator) from a random op that computes
        differently from the same state.
        """
        seq = self._seq - 1
        state = _generator_crc(self._torch, args, kwargs)
        result = call(*args, **kwargs)
        crcs = []
        for t in _tensors_out(result):
            dtype = _dtype_name(t.dtype)
            crcs.append(zlib.crc32(_host_bytes(t)) if dtype in dumpfile.DTYPES and t.layout == self._torch.strided else None)
        self._random[seq] = {"rng_crc32": state, "out_crc32": crcs}
        return result

    def _api_call(self) -> str:
        """For an op outside every module (gradient clipping, an optimizer's step, zero_grad): the
        torch function the user called, as `torch.nn.utils.clip_grad.clip_grad_norm_` or
        `torch.optim.sgd.SGD.step`; "" when the user's own code issued the op.

        The outermost public torch function between the op and the user's frame: inner helpers
        (`_clip_grads_with_norm_`, `_single_tensor_sgd`) and wrappers (`<locals>`) are skipped.
        """
        frame = sys._getframe(1)
        found = ""
        cache = self._api_calls
        torch_root = self._library_roots[0]
        while frame is not None:
            code = frame.f_code
            library = self._frame_cache.get(code)
            if library is None:
                library = self._library_code(code)
            if not library:
                return found
            name = cache.get(code, False)
            if name is False:
                name = cache[code] = _public_torch_name(code, torch_root)
            if name:
                found = name
            frame = frame.f_back
        return found

    def _library_code(self, code: Any) -> bool:
        """Is this code torch's, accelport's or the standard library's (not the user's)? Cached per code object."""
        filename = code.co_filename
        path = os.path.abspath(filename)
        library = filename.startswith("<") or (
            path.startswith(self._library_roots)
            and not (path.startswith(self._stdlib) and "-packages" in path)
        )
        self._frame_cache[code] = library
        return library

    def _line_text(self, code: Any, line: int) -> str:
        """"file:line" of a code location, relative to the working directory; kept in _lines."""
        text = self._lines[(code, line)] = f"{_short_path(code.co_filename)}:{line}"
        return text

    def _call_index(self, phase: str, module: str, op: str) -> int:
        key = (phase, module, op)
        index = self._calls.get(key, 0)
        self._calls[key] = index + 1
        return index

    # -- tensors -----------------------------------------------------------------------------

    def _entry(
        self,
        t: Any,
        src: int | None = None,
        fresh: bool = False,
        alias_of: _Entry | None = None,
        same_order: bool = False,
        mutated: bool = False,
    ) -> _Entry:
        """The recorded description of `t`, from the cache while `t` is unchanged.

        mutated: `t` is an input the op just changed (in place, or as out=); torch bumps its
        version counter once the op returns, so the entry is kept under the version to come.
        """
        key = id(t)
        if not fresh:
            hit = self._cache.get(key)
            if hit is not None and hit[0]() is t and hit[1] == t._version:
                return hit[2]
        dtype = _dtype_name(t.dtype)
        shape = list(t.shape)
        if (
            alias_of is not None
            and alias_of.stats is not None
            and t.numel() == _numel(alias_of.shape)
        ):
            entry = _Entry(dtype, shape, alias_of.stats, src)
            if same_order:
                entry.data = alias_of.data
        else:
            assert self._stats is not None
            entry = _Entry(dtype, shape, self._stats.compute(t), src)
        version = _version(t)
        if version is not None:  # (an inference tensor has none: changes to it could not be seen)
            self._remember(t, version + 1 if mutated else version, entry)
        return entry

    def _remember(self, t: Any, version: int, entry: _Entry) -> None:
        """Keep `entry` as the description of `t` while its version counter reads `version`."""
        cache = self._cache
        cache[id(t)] = (weakref.ref(t), version, entry)
        if len(cache) > self._cache_limit:
            self._prune()

    def _desc_of(self, entry: _Entry) -> dict[str, Any]:
        """The entry as records list it when nothing is saved or checksummed: built once, shared."""
        desc = self._new_desc(entry)
        if entry.data:
            desc.update(entry.data)
        entry.desc = desc
        return desc

    def _new_desc(self, entry: _Entry) -> dict[str, Any]:
        """dtype, shape, statistics and where the tensor came from; device statistics are filled in at the flush."""
        stats = entry.stats
        desc: dict[str, Any] = {
            "dtype": entry.dtype,
            "shape": entry.shape,
            "stats": stats if stats is None or isinstance(stats, int) else _json_stats(stats),
        }
        if entry.src is not None:
            desc["src"] = entry.src
        if entry.uninitialised:
            desc["uninitialised"] = True
        if isinstance(stats, int):
            self._unresolved.append(desc)
        return desc

    def _describe(
        self, entry: _Entry, t: Any, save: bool, step: int, key: str, crc: bool = False
    ) -> dict[str, Any]:
        if not (save or crc or self.checksums):
            return entry.desc or self._desc_of(entry)
        out = self._new_desc(entry)
        info = entry.data if entry.data is not None else {}
        need_crc = (self.checksums or crc) and "crc32" not in info
        need_file = save and self._store is not None and "file" not in info
        if (need_crc or need_file) and entry.dtype in dumpfile.DTYPES:
            data = _host_bytes(t)
            info = dict(info)
            if need_crc:
                info["crc32"] = zlib.crc32(data)
            if need_file:
                assert self._store is not None
                file, start, nbytes = self._store.add(step, key, entry.dtype, entry.shape, data)
                info.update({"file": file, "start": start, "nbytes": nbytes})
            entry.data = info
            entry.desc = None  # the shared description lacks the new keys
        if entry.data:
            out.update(entry.data)
        return out

    # -- hooks -------------------------------------------------------------------------------

    def _on_op(self, func: Any, args: tuple, kwargs: dict) -> Any:
        if self._busy or not self._live:
            return func(*args, **kwargs)
        # The phase and module, inline: this runs for every op.
        torch_c = self._C
        node_name = None
        if torch_c._current_graph_task_id() != -1:
            phase = "backward"
            module, node_name = self._backward_module(torch_c._current_autograd_node())
        else:
            if self._in_optimizer:
                phase = "optimizer"
            elif self._forward_stack or torch_c.is_grad_enabled():
                phase = "forward"
            else:
                phase = "other"
            if self._forward_stack:
                module = self._forward_stack[-1]
            elif phase == "forward":
                module = ""
            else:
                module = self._api_call()  # clip_grad_norm_, SGD.step: the call stands for the module
        if phase not in self.phases:
            return func(*args, **kwargs)
        key = id(func)
        info = self._op_info.get(key, False)
        if info is False:
            info = self._op_info[key] = _op_info(func)
        if info is None:  # not numeric
            return func(*args, **kwargs)
        if self._filtered and not self._wanted(module, info[0]):
            return func(*args, **kwargs)
        self._busy = True
        try:
            if info[5] and not self.views:
                result = info[6](*args, **kwargs)
                if self._pass_view(args[0] if args else None, result, info):
                    return result
                # A view this cannot vouch for (see _pass_view): recorded like any op.
                return self._record_op(args, kwargs, phase, info, module, node_name, result)
            return self._record_op(args, kwargs, phase, info, module, node_name)
        finally:
            self._busy = False

    def _pass_view(self, source: Any, result: Any, info: tuple) -> bool:
        """Give a view's output the entry of the tensor it views (statistics, src, saved data).

        Statistics still waiting for a device batch are shared as the index into it (the
        flush fills in every cached entry). False, and nothing cached, when the output is
        not one tensor with the elements of the first argument: the op is then recorded.
        """
        tensor = self._tensor
        if not (isinstance(source, tensor) and isinstance(result, tensor)):
            return False
        # The view shares its source's version counter once the op returns (torch links
        # them above the dispatch mode: inside it the view still shows a counter of its own).
        version = _version(source)
        if version is None:  # an inference tensor: no counter, so no cache; record the view
            return False
        hit = self._cache.get(id(source))
        if hit is not None and hit[0]() is source and hit[1] == version:
            base = hit[2]
        else:
            base = self._entry(source)
        if info[4]:  # expand
            entry = _replicated(base, [result]) if isinstance(base.stats, list) else None
            if entry is None:  # statistics still on the device (or none): measure the output
                assert self._stats is not None
                entry = _Entry(_dtype_name(result.dtype), list(result.shape), self._stats.compute(result), None)
        elif result.numel() == source.numel():
            entry = _Entry(_dtype_name(result.dtype), list(result.shape), base.stats, None)
        else:
            return False
        entry.src = base.src
        entry.uninitialised = base.uninitialised
        if info[3]:  # same element order: with full tensors, the saved bytes are the view's too
            entry.data = base.data
        self._remember(result, version, entry)
        return True

    def _prune(self) -> None:
        """Drop the cache entries of tensors that no longer exist."""
        cache = self._cache
        for key in [key for key, hit in cache.items() if hit[0]() is None]:
            del cache[key]
        self._cache_limit = max(_CACHE_PRUNE, 2 * len(cache))

    def _record_op(
        self,
        args: tuple,
        kwargs: dict,
        phase: str,
        info: tuple,
        module: str,
        node_name: str | None,
        result: Any = _NOT_RUN,
    ) -> Any:
        """Record one op and return its result; `result`: the op already ran (a view, which changes no input)."""
        op, run_op = info[0], info[6]
        if not self._opened:
            self._open()
        save = self.tensors and self._save_tensors_of(module, op)
        # Nothing saved or checksummed (statistics mode): each tensor's description is
        # built once and shared by every record that lists it.
        shared = not (save or self.checksums)
        inputs = _tensors_in(args, kwargs)
        cache = self._cache
        entry_of = self._entry
        in_entries = []
        for t in inputs:
            hit = cache.get(id(t))
            if hit is not None and hit[0]() is t and hit[1] == t._version:
                in_entries.append(hit[2])
            else:
                in_entries.append(entry_of(t))
        # In-place ops change their inputs: describe (and save) them before the op runs.
        seq = self._seq
        self._seq = seq + 1
        step = self.current_step
        describe = self._describe
        if shared:
            desc_of = self._desc_of
            in_desc = [e.desc or desc_of(e) for e in in_entries]
        else:
            in_desc = [
                describe(e, t, save, step, f"{seq}.in.{i}" if save else "")
                for i, (t, e) in enumerate(zip(inputs, in_entries, strict=True))
            ]
        if result is _NOT_RUN:
            result = run_op(*args, **kwargs)
        outputs = _tensors_out(result)
        out_desc = self._output_descs(outputs, inputs, in_entries, seq, info, save, step)
        line = self._user_line() if phase != "backward" else self._call_sites.get(module)
        calls = self._calls
        call_key = (phase, module, op)
        call = calls.get(call_key, 0)
        calls[call_key] = call + 1
        # The identity (as _identity builds it), then what the op did.
        record = {
            "k": "op",
            "seq": seq,
            "step": step,
            "phase": phase,
            "op": op,
            "module": module,
            "call": call,
            "line": line,
            "args": _describe_args(args, kwargs),
            "in": in_desc,
            "out": out_desc,
        }
        if node_name is not None:
            record["node"] = node_name
        self._records.append(record)
        self._waiting_tensors += len(in_desc) + len(out_desc)
        if self._waiting_tensors >= self.flush_every:
            self._flush()
        return result

    def _output_descs(
        self,
        outputs: list[Any],
        inputs: list[Any],
        in_entries: list[_Entry],
        seq: int,
        info: tuple,
        save: bool = False,
        step: int = 0,
    ) -> list[dict[str, Any]]:
        """The descriptions of an op's outputs (measured, or shared with the input they alias), each cached."""
        _op, uninitialised, aliasing, same_order, expand, _view, _run = info
        shared = not (save or self.checksums)
        alias = in_entries[0] if aliasing and in_entries else None
        if expand and in_entries and isinstance(in_entries[0].stats, list):
            alias = _replicated(in_entries[0], outputs)
        out_desc = []
        for i, t in enumerate(outputs):
            if uninitialised:
                entry = _Entry(_dtype_name(t.dtype), list(t.shape), None, seq)
                entry.uninitialised = True
                desc: dict[str, Any] = {
                    "dtype": entry.dtype,
                    "shape": entry.shape,
                    "stats": None,
                    "uninitialised": True,
                }
                version = _version(t)
                if version is not None:
                    self._remember(t, version, entry)
            else:
                mutated = False
                for u in inputs:
                    if u is t:
                        mutated = True
                        break
                entry = self._entry(t, src=seq, fresh=True, alias_of=alias, same_order=same_order,
                                    mutated=mutated)  # fmt: skip
                if shared:
                    desc = self._desc_of(entry)
                else:
                    desc = self._describe(entry, t, save, step, f"{seq}.out.{i}" if save else "")
            out_desc.append(desc)
        return out_desc

    def _compute(self, t: Any) -> Any:
        """The statistics of a tensor (the compiled recorder asks for those it does not measure itself)."""
        assert self._stats is not None
        return self._stats.compute(t)

    def _identity(
        self, kind: str, seq: int, step: int, phase: str, op: str, module: str, line: str | None
    ) -> dict[str, Any]:
        """What makes a record findable in both runs: step, phase, module, op, call index, source line."""
        return {
            "k": kind,
            "seq": seq,
            "step": step,
            "phase": phase,
            "op": op,
            "module": module,
            "call": self._call_index(phase, module, op),
            "line": line,
        }

    def _leaf_record(self, kind: str, module: str, name: str, tensor: Any, phase: str) -> None:
        """A parameter, gradient or model input: checked before any op that uses it."""
        if phase not in self.phases and kind != "param":
            return
        op = f"{kind}:{name}"
        if not self._wanted(module, op):
            return
        self._open()
        seq = self._seq
        self._seq += 1
        step = self.current_step
        entry = self._entry(tensor, src=seq, fresh=True)
        save = self._save_tensors_of(module, op)
        record = self._identity(kind, seq, step, phase, op, module, self._call_sites.get(module))
        # Parameters at the first step and model inputs carry a CRC-32: the two runs must
        # start from the same bits, and a checksum proves they did (or did not).
        crc = self.param_checksums and (kind == "input" or step == 0)
        record["out"] = [self._describe(entry, tensor, save, step, f"{seq}.out.0", crc=crc)]
        self._emit(record, 1)

    def _name_of(self, mod: Any) -> str:
        names = self._module_names
        hit = names.get(id(mod))
        if hit is not None and hit[0]() is mod:
            return hit[1]
        if self._forward_stack:
            # A module the root did not register (created on the fly): name it under its caller.
            name = f"{self._forward_stack[-1]}.<{type(mod).__name__}>"
        else:
            root = type(mod).__name__
            for child_name, child in mod.named_modules(remove_duplicate=False):
                known = names.get(id(child))
                if known is None or known[0]() is not child:
                    names[id(child)] = (weakref.ref(child), f"{root}.{child_name}" if child_name else root)
            for param_name, param in mod.named_parameters(remove_duplicate=False):
                owner, _, leaf = param_name.rpartition(".")
                self._param_names.setdefault(
                    id(param), (f"{root}.{owner}" if owner else root, leaf)
                )
            name = names[id(mod)][1]
        names[id(mod)] = (weakref.ref(mod), name)
        return name

    def _on_module_enter(self, mod: Any, args: tuple) -> None:
        if self._optimizer_frames:
            self._settle_optimizer()
            if self._mode_off:
                # A module running inside optimizer.step (not through a closure): record
                # as without the shortcut.
                self._resume_mode()
        if self._busy or not self._live:
            return
        self._busy = True
        try:
            self._module_enter(mod, args)
        finally:
            self._busy = False

    def _module_enter(self, mod: Any, args: tuple) -> None:
        is_root = not self._forward_stack
        name = self._name_of(mod)
        if is_root and self.step_on == "forward" and self._seq and id(mod) in self._entered:
            self.step()
            if not self._live:
                return
        if name not in self._call_sites:
            self._call_sites[name] = self._user_line() or ""
        self._forward_stack.append(name)
        if self._amp_recorded != self.current_step:
            self._amp_recorded = self.current_step
            self._record_step_start()
        if id(mod) not in self._entered:
            self._entered.add(id(mod))
            for pname, param in mod.named_parameters(recurse=False):
                self._leaf_record("param", name, pname, param, "forward")
            if is_root:
                for index, tensor in enumerate(_tensors_in(args, {})):
                    self._leaf_record("input", name, str(index), tensor, "forward")
        self._mark(name)

    def _on_module_exit(self, mod: Any, args: tuple, output: Any) -> None:
        if self._busy or not self._forward_stack or self._forked:
            return
        self._forward_stack.pop()
        self._mark(self._forward_stack[-1] if self._forward_stack else "")

    def _mark(self, module: str) -> None:
        """From autograd's next sequence number on, new nodes are `module`'s."""
        number = self._sequence_nr()
        marks = self._marks
        if marks and marks[-1] == number:
            # No node made since the last mark (no grad, or a module with no ops): that
            # mark says nothing any more. So with gradients off the list never grows.
            self._marked[-1] = module
            return
        marks.append(number)
        self._marked.append(module)
        if len(marks) > _MARKS_KEPT:  # a run that never ends a step: keep the newer half
            half = len(marks) // 2
            del marks[:half], self._marked[:half]
            self._marks_before = max(0, self._marks_before - half)

    def _backward_module(self, node: Any) -> tuple[str, str | None]:
        """The module whose forward made the autograd node now running, and the node's name.

        A gradient accumulator (AccumulateGrad) is made for its parameter, not by an op:
        it belongs to the parameter's module.
        """
        if node is None:
            return "", None
        number = node._sequence_nr()
        known = self._node_modules.get(number)
        if known is not None:
            return known
        name = node.name()
        variable = getattr(node, "variable", None) if name.endswith("AccumulateGrad") else None
        if variable is not None:
            # Every accumulator has the same (largest) number: not cached by it.
            return self._param_names.get(id(variable), ("", ""))[0], name
        at = bisect.bisect_right(self._marks, number) - 1
        known = self._node_modules[number] = (self._marked[at] if at >= 0 else "", name)
        return known

    def _record_step_start(self) -> None:
        torch = self._torch
        amp = {}
        for device in ("cpu", "cuda", "xpu", "npu", "mlu", "musa", "hpu"):
            try:
                if torch.is_autocast_enabled(device):
                    amp[device] = str(torch.get_autocast_dtype(device)).replace("torch.", "")
            except (RuntimeError, AttributeError, TypeError):
                continue
        self._open()
        self._emit(
            {"k": "step", "step": self.current_step, "autocast": amp, "rng_crc32": _rng_crc(torch)},
            0,
        )

    def _on_optimizer_pre(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self._optimizer_frames:
            self._settle_optimizer()
        self._optimizer_frames.append(sys._getframe(1))  # the wrapper that runs the step
        self._in_optimizer = len(self._optimizer_frames)
        if self._busy or not self._live:
            return
        if "optimizer" not in self.phases:
            # None of the step's own ops will be recorded: take the dispatch mode off the
            # stack while it runs, so they do not each pay a Python round trip. Not with a
            # closure (LBFGS): it runs forward and backward, whose ops are recorded.
            closure = any(callable(v) for v in args[1:]) or any(
                callable(v) for v in kwargs.values()
            )
            if self._in_optimizer == 1 and not closure:
                self._suspend_mode()
            return
        self._busy = True
        try:
            self._record_grads(optimizer)
        finally:
            self._busy = False

    def _settle_optimizer(self) -> None:
        """Forget optimizer steps that are over (one that raised never ran its post-hook).

        Puts the dispatch mode back once no step is running.
        """
        frames = self._optimizer_frames
        if frames:
            live = set()
            frame = sys._getframe(1)
            while frame is not None:
                live.add(id(frame))
                frame = frame.f_back
            while frames and id(frames[-1]) not in live:
                frames.pop()
        self._in_optimizer = len(frames)
        if not frames and self._mode_off:
            self._resume_mode()

    def _suspend_mode(self) -> None:
        from torch.utils._python_dispatch import _get_current_dispatch_mode

        # Only when it is on top: another mode pushed above it stays where it is.
        if self._mode is not None and _get_current_dispatch_mode() is self._mode:
            self._mode.__exit__(None, None, None)
            self._mode_off = True

    def _resume_mode(self) -> None:
        if self._mode_off:
            self._mode_off = False
            if not self._closed:
                self._mode.__enter__()

    def _record_grads(self, optimizer: Any) -> None:
        for group in optimizer.param_groups:
            for param in group["params"]:
                if param.grad is None:
                    continue
                module, name = self._param_names.get(id(param), ("", f"param{id(param):x}"))
                self._leaf_record("grad", module, name, param.grad, "optimizer")

    def _on_optimizer_post(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self._optimizer_frames:
            self._optimizer_frames.pop()
            self._settle_optimizer()
        if self.step_on == "optimizer" and not self._forked:
            self.step()


def capture(run_dir: str | os.PathLike[str], **options: Any) -> Capture:
    """Record every op, parameter and input of the code run inside the `with` block into `run_dir`.

    Options: tensors (save full tensors), steps ("N..M"), modules / ops (glob filters on what is
    recorded), tensor_modules / tensor_ops (globs on which records keep full tensors), phases,
    checksums (CRC-32 of every tensor), step_on ("optimizer", "forward" or "manual").
    """
    return Capture(run_dir, **options)


# -- helpers -----------------------------------------------------------------------------------


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _short_path(filename: str) -> str:
    cwd = os.getcwd() + os.sep
    return filename[len(cwd) :] if filename.startswith(cwd) else filename


def _op_info(func: Any) -> tuple[str, bool, bool, bool, bool, bool, Any] | None:
    """(name, uninitialised output, aliasing, same element order, expand, view, callable) of an op; None: not numeric.

    The callable is the operator's C++ entry point where it has one (an OpOverload's
    __call__ is a Python frame that only forwards to it).
    """
    op = str(func)
    if op.startswith(_NOT_NUMERIC):
        return None
    call = getattr(func, "_op", None) if type(func).__name__ == "OpOverload" else None
    if _is_random(func, op):
        call = _RandomOp(call or func)
    return (op, op.startswith(_UNINITIALISED_PREFIXES), op in _ALIAS_OPS, op in _SAME_ORDER_OPS,
            op == "aten.expand.default", op in _VIEW_OPS, call or func)  # fmt: skip


# Random ops by name, where an op carries no tags (ATen marks them `nondeterministic_seeded`).
_RANDOM_NAMES = ("aten.bernoulli", "aten.native_dropout", "aten.dropout", "aten.randperm", "aten.rand",
                 "aten.normal", "aten.uniform", "aten.multinomial", "aten.exponential", "aten.geometric",
                 "aten.cauchy", "aten.log_normal", "aten.random_", "aten.poisson")  # fmt: skip


def _is_random(func: Any, op: str) -> bool:
    """Does the op draw from a random number generator (dropout, bernoulli, randperm, rand*, normal_ ...)?"""
    tags = getattr(func, "tags", None)
    if tags:
        import torch

        return torch.Tag.nondeterministic_seeded in tags
    return op.startswith(_RANDOM_NAMES)


class _RandomOp:
    """The callable of a random op: runs it under the capture recording it, which notes the
    generator's state before and the bits it drew (see Capture._run_random)."""

    __slots__ = ("call",)

    def __init__(self, call: Any) -> None:
        self.call = call

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        capture = _RECORDING[-1] if _RECORDING else None
        if capture is None:
            return self.call(*args, **kwargs)
        return capture._run_random(self.call, args, kwargs)


def _json_stats(stats: list[float]) -> list[Any]:
    """Statistics as the manifest writes them: NaN and Inf as strings (JSON has neither)."""
    # Statistics are floats; one sum tells whether any is NaN or Inf (an overflowing sum
    # only sends the list the slow way).
    if math.isfinite(sum(stats)):
        return stats
    clean = dumpfile.clean_float
    return [clean(float(v)) for v in stats]


def _dtype_name(dtype: Any) -> str:
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype).replace("torch.", "")
    return name


def _version(t: Any) -> int | None:
    """The tensor's version counter (bumped by every in-place change); None for an inference tensor, which has none."""
    try:
        return t._version
    except RuntimeError:
        return None


def _no_sequence_nr() -> int:
    """Stands in for torch.autograd._get_sequence_nr where torch lacks it: past every node's
    number, so no mark precedes a node and backward ops have no module."""
    return 1 << 64


def _numel(shape: list[int]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _replicated(source: _Entry, outputs: list[Any]) -> _Entry | None:
    """Statistics of an expand: every element of the input repeated the same number of times."""
    if len(outputs) != 1 or not source.stats:
        return None
    times = outputs[0].numel() // max(1, _numel(source.shape))
    lo, hi, mean, l2, abs_mean, nan, inf, zero = source.stats
    stats = [lo, hi, mean, l2 * math.sqrt(times), abs_mean, nan * times, inf * times, zero * times]
    return _Entry(source.dtype, list(outputs[0].shape), stats, None)


def _dense_view(x: Any) -> Any:
    """A 1-D view of the memory of `x` when its elements fill it exactly (any dimension order)."""
    dims = sorted(
        (stride, size) for stride, size in zip(x.stride(), x.shape, strict=True) if size != 1
    )
    expected = 1
    for stride, size in dims:
        if stride != expected:
            return None
        expected *= size
    return x.as_strided((x.numel(),), (1,), x.storage_offset())


def _tensors_in(args: tuple, kwargs: dict) -> list[Any]:
    tensor = _tensor_type()
    found: list[Any] = []
    for value in (*args, *kwargs.values()) if kwargs else args:
        if isinstance(value, tensor):
            found.append(value)
        elif isinstance(value, list | tuple):
            found.extend(v for v in value if isinstance(v, tensor))
    return found


@functools.cache
def _tensor_type() -> type:
    import torch  # not at module level: the module loads without torch

    return torch.Tensor


def _tensors_out(result: Any) -> list[Any]:
    tensor = _tensor_type()
    if isinstance(result, tensor):
        return [result]
    if isinstance(result, list | tuple):
        found: list[Any] = []
        for value in result:
            if isinstance(value, tensor):
                found.append(value)
            elif isinstance(value, list | tuple):
                found.extend(v for v in value if isinstance(v, tensor))
        return found
    return []


def _describe_args(args: tuple, kwargs: dict) -> dict[str, Any]:
    """Non-tensor arguments as JSON (tensors become {"t": index}), enough to replay the op."""
    tensor = _tensor_type()
    counter = [0]
    plain = _PLAIN_ARG_TYPES
    positional = []
    for v in args:
        kind = type(v)
        if kind in plain:
            positional.append(v)
        elif kind is tensor:  # the common case, without a call
            positional.append({"t": counter[0]})
            counter[0] += 1
        else:
            positional.append(_arg_json(v, counter, tensor))
    if not kwargs:
        return {"a": positional}
    named = {k: v if type(v) in plain else _arg_json(v, counter, tensor) for k, v in kwargs.items()}
    return {"a": positional, "kw": named}


_PLAIN_ARGS = (type(None), bool, int, str)
_PLAIN_ARG_TYPES = frozenset(_PLAIN_ARGS)


def _arg_json(value: Any, counter: list[int], tensor_type: type) -> Any:
    """A non-plain argument as JSON (callers pass plain None/bool/int/str through themselves)."""
    if isinstance(value, tensor_type):
        counter[0] += 1
        return {"t": counter[0] - 1}
    if isinstance(value, bool | int | str):  # subclasses (IntEnum...)
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"float": repr(value)}
    if isinstance(value, list | tuple):
        plain = _PLAIN_ARGS
        return [v if type(v) in plain else _arg_json(v, counter, tensor_type) for v in value]
    text = str(value)
    if text.startswith("torch."):
        return {"torch": text[len("torch.") :]}
    if type(value).__name__ == "device":
        return {"device": text}
    if type(value).__name__ == "Generator" and hasattr(value, "initial_seed"):
        # Its repr holds an address, different in every run: the seed and device identify it.
        return {"generator": {"device": str(value.device), "seed": value.initial_seed()}}
    return {"repr": repr(value)}


def _arg_json_at(value: Any, index: int) -> tuple[Any, int]:
    """_arg_json for the compiled recorder: the JSON and the next tensor index."""
    counter = [index]
    return _arg_json(value, counter, _tensor_type()), counter[0]


def _host_bytes(t: Any) -> memoryview:
    import torch

    x = t.detach()
    if x.device.type != "cpu":
        x = x.to("cpu")
    x = x.contiguous()
    if x.dtype == torch.bfloat16:
        x = x.view(torch.int16)
    elif x.dtype == torch.bool:
        x = x.view(torch.uint8)
    return memoryview(x.numpy()).cast("B")


def _rng_crc(torch: Any) -> int:
    return zlib.crc32(torch.get_rng_state().numpy().tobytes())


def _generator_crc(torch: Any, args: tuple, kwargs: dict) -> int | None:
    """CRC-32 of the state of the generator a random op draws from (its `generator=`, else its device's default)."""
    generator = kwargs.get("generator")
    try:
        if generator is not None:
            state = generator.get_state()
        else:
            device = kwargs.get("device")
            if device is None:
                tensors = _tensors_in(args, {})
                device = tensors[0].device if tensors else "cpu"
            device = torch.device(device)
            if device.type == "cpu":
                state = torch.default_generator.get_state()
            else:
                module = torch.get_device_module(device.type)
                state = module.get_rng_state(device.index if device.index is not None else module.current_device())
        return zlib.crc32(state.cpu().numpy().tobytes())
    except (RuntimeError, AttributeError, TypeError, ValueError):
        return None  # a backend without a readable generator state: the outputs' bits still tell


def _public_torch_name(code: Any, torch_root: str) -> str | None:
    """`torch.nn.utils.clip_grad.clip_grad_norm_` for a public function or method of torch; None for
    anything else (a private helper, a local wrapper, code outside torch)."""
    path = os.path.abspath(code.co_filename)
    if not path.startswith(torch_root):
        return None
    qualname = getattr(code, "co_qualname", code.co_name)
    if "<" in qualname or any(part.startswith("_") for part in qualname.split(".")):
        return None
    module = path[len(torch_root) :].removesuffix(".py").replace(os.sep, ".").removesuffix(".__init__")
    if any(part.startswith("_") for part in module.split(".")):
        return None  # torch._tensor, torch.utils._contextlib: machinery, not what the user called
    return f"torch.{module}.{qualname}"


def run_callable(run_dir: str | os.PathLike[str], fn: Callable[[], Any], **options: Any) -> Any:
    """Run `fn()` under a capture (convenience for scripts and tests)."""
    with capture(run_dir, **options):
        return fn()


ENV_VAR = "ACCELPORT_DUMP"


def bootstrap_dir() -> Path:
    """The folder whose sitecustomize.py starts a capture in every Python process of a wrapped command."""
    return Path(__file__).parent / "_bootstrap"


def start_from_environment() -> Capture | None:
    """Start the capture described by $ACCELPORT_DUMP (JSON written by `accelport dump`), closed at exit.

    Each rank of a distributed run writes its own folder (rankN). Another Python process of
    the same command that records ops after the folder is taken (a launcher, a spawned
    worker) writes to pidN inside it; a process forked from a capturing one (a DataLoader
    worker) records nothing. Folders are created at the first record, so a process that
    runs no torch op leaves nothing.
    """
    import atexit
    import json
    import signal

    options = json.loads(os.environ[ENV_VAR])
    folder = Path(options.pop("dir"))
    if "RANK" in os.environ:
        folder = folder / f"rank{os.environ['RANK']}"
    if (folder / dumpfile.MANIFEST).exists():
        folder = folder / f"pid{os.getpid()}"
    cap = Capture(folder, lazy=True, **options)
    cap.start()
    atexit.register(cap.close)
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):

        def on_term(signum: int, frame: Any) -> None:
            cap.close()
            raise SystemExit(128 + signum)

        signal.signal(signal.SIGTERM, on_term)
    return cap
