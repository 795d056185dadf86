"""Statistics of the tensors a capture records, computed where each tensor lives (see dump.py)."""

from __future__ import annotations

import math
import os
import threading
from ctypes import c_double as _C_DOUBLE
from typing import Any

from accelport.verify.numerics import native

_HOST_CHUNK = 1 << 16  # elements per statistics sweep on the CPU: 256 KiB of float32 stays in L2
_SPLIT = 8 * _HOST_CHUNK  # tensors this large are swept by two threads
_SWEEP_START = (math.inf, -math.inf, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)  # min, max, sums, counts
_SWEEP_ARRAY = _C_DOUBLE * 9
STATS_KERNEL_VAR = "ACCELPORT_DUMP_STATS_KERNEL"
_SWEEP_START_BYTES = bytes(_SWEEP_ARRAY(*_SWEEP_START))  # copied into a new array per tensor: fast


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

