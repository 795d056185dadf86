"""Numeric difference between two recorded tensors: metrics, dtype-aware tolerances, and a pass/fail per tensor.

torch.testing's elementwise rule, `|t - r| <= atol + rtol * |r|`, fails whenever two
devices round an element near zero differently, or a ReLU mask flips on an element
within rounding of zero, or a sum cancels: every bf16-versus-fp32 pair and many fp32
pairs across devices. accelport judges op outputs by the same rule in norm form,

    ||t - r||_2 <= atol * sqrt(n) + rtol * ||r||_2          (criterion "norm", the default)

which a uniform error of rtol per element just meets, and which one flipped element
cannot break. The norm can hide one badly wrong element in a large tensor (its share of
the L2 shrinks as sqrt(n) grows), so "norm" also holds every element to an allclose-style
bound at the tensor's scale,

    |t - r| <= GUARD * (atol + rtol * max |r|)                   (each element, GUARD = 10)

loose enough for rounding near zero and for cancellation, and broken by a single element
that is wrong by more than a few percent of the tensor's largest value. Parameters and model inputs are data, not results, so they are held to
the largest error as well (criterion "max"): `max |t - r| <= atol + rtol * max |r|`.
`elementwise` applies torch.testing's rule to every element. Every metric (max abs,
max rel, mean rel, RMSE, cosine, ULP, allclose fraction, NaN/Inf positions) is reported
whichever criterion decides.

From statistics alone (no full tensors), the bounds the criterion implies on min, max,
mean, abs-mean and L2 norm are checked: a statistic outside its bound proves the
tensors differ, so statistics mode never fails a pair that full tensors would pass.
"""

from __future__ import annotations

import math
import os
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from accelport.verify.numerics import dumpfile

_FLOAT_RANK = {"float64": 4, "float32": 3, "float16": 2, "bfloat16": 1}
# Under "norm", no single element may differ by more than GUARD times the "max" criterion's bound.
GUARD = 10.0


@dataclass(frozen=True)
class Tolerance:
    dtype: str  # the dtype whose tolerance applies
    rtol: float
    atol: float
    mantissa_bits: int
    small_value: float


@cache
def _table() -> dict[str, Any]:
    from accelport import knowledge

    return knowledge.read_toml("numerics.toml")


def defaults() -> dict[str, Any]:
    return _table()


def tolerance_for(
    ref_dtype: str,
    test_dtype: str,
    overrides: Mapping[str, tuple[float, float]] | None = None,
    autocast: tuple[str, ...] = (),
) -> Tolerance:
    """The tolerance of the lower-precision side; integers and booleans must match exactly.

    `autocast` holds the autocast dtypes of the two runs: a floating-point tensor of a
    mixed-precision run is judged with the autocast dtype's tolerance, whatever its own dtype.
    """
    table = _table()["dtype"]
    floats = [d for d in (ref_dtype, test_dtype) if d in _FLOAT_RANK]
    if not floats:
        return Tolerance(ref_dtype, 0.0, 0.0, 0, 0.0)
    floats += [d for d in autocast if d in _FLOAT_RANK]
    lower = min(floats, key=lambda d: _FLOAT_RANK[d])
    entry = table[lower]
    rtol, atol = float(entry["rtol"]), float(entry["atol"])
    if overrides and lower in overrides:
        rtol, atol = overrides[lower]
    elif overrides and "*" in overrides:
        rtol, atol = overrides["*"]
    return Tolerance(lower, rtol, atol, int(entry["mantissa_bits"]), float(entry["small_value"]))


@dataclass
class TensorDiff:
    """How one tensor of TEST differs from the same tensor of REF."""

    passed: bool
    score: float  # error / allowed error (<= 1 passes); the headline number of a row
    reason: str = ""  # why it failed, in words
    source: str = "stats"  # "stats", "tensor" or "checksum"
    metrics: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "score": _finite(self.score),
            "reason": self.reason,
            "source": self.source,
            **{k: _finite(v) for k, v in self.metrics.items()},
        }


def _finite(value: float) -> float | str:
    return dumpfile.clean_float(float(value)) if isinstance(value, float | int) else value


def shape_problem(ref: Mapping[str, Any], test: Mapping[str, Any]) -> str:
    if list(ref.get("shape", [])) != list(test.get("shape", [])):
        return f"shape {ref.get('shape')} vs {test.get('shape')}"
    return ""


CRITERIA = ("norm", "max", "elementwise")


def compare_stats(
    ref: Mapping[str, Any], test: Mapping[str, Any], tol: Tolerance, criterion: str = "norm"
) -> TensorDiff:
    """Judge two tensors by their recorded statistics alone (bounds implied by `criterion`)."""
    r = [dumpfile.as_float(v) for v in ref["stats"]]
    t = [dumpfile.as_float(v) for v in test["stats"]]
    n = max(1, math.prod(ref.get("shape", [])) - int(r[5]) - int(r[6]))
    metrics: dict[str, float] = {}
    reasons = []
    if int(r[5]) != int(t[5]) or int(r[6]) != int(t[6]):
        metrics["nan_ref"], metrics["nan_test"] = r[5], t[5]
        metrics["inf_ref"], metrics["inf_test"] = r[6], t[6]
        return TensorDiff(
            False,
            math.inf,
            f"NaN/Inf count {int(r[5])}/{int(r[6])} vs {int(t[5])}/{int(t[6])}",
            "stats",
            metrics,
        )
    if any(math.isnan(v) for v in r[:5] + t[:5]):
        all_nan = all(math.isnan(v) for v in r[:5]) and all(math.isnan(v) for v in t[:5])
        return TensorDiff(
            all_nan,
            0.0 if all_nan else math.inf,
            "" if all_nan else "statistics missing on one side",
            "stats",
        )
    amax = max(abs(r[0]), abs(r[1]))
    rms = r[3] / math.sqrt(n)
    # Under "norm", one element can carry the whole allowed L2 error, but no more than the
    # element guard allows: extremes get the smaller of the two bounds.
    extreme = (
        tol.atol + tol.rtol * amax
        if criterion != "norm"
        else min(tol.atol * math.sqrt(n) + tol.rtol * r[3], GUARD * (tol.atol + tol.rtol * amax))
    )
    bounds = {
        "min": (abs(t[0] - r[0]), extreme),
        "max": (abs(t[1] - r[1]), extreme),
        "mean": (abs(t[2] - r[2]), tol.atol + tol.rtol * rms),
        "abs_mean": (abs(t[4] - r[4]), tol.atol + tol.rtol * rms),
        "l2": (abs(t[3] - r[3]), tol.atol * math.sqrt(n) + tol.rtol * r[3]),
    }
    score = 0.0
    worst = ""
    for name, (error, allowed) in bounds.items():
        metrics[f"d_{name}"] = error
        ratio = error / allowed if allowed > 0 else (0.0 if error == 0 else math.inf)
        if ratio > score:
            score, worst = ratio, name
    metrics["rel_l2"] = abs(t[3] - r[3]) / r[3] if r[3] > 0 else (0.0 if t[3] == 0 else math.inf)
    metrics["max_abs_lower_bound"] = max(bounds["min"][0], bounds["max"][0], bounds["mean"][0])
    passed = score <= 1.0
    if not passed:
        reasons.append(
            f"{worst} differs by {bounds[worst][0]:.3g} (allowed {bounds[worst][1]:.3g})"
        )
    return TensorDiff(passed, score, "; ".join(reasons), "stats", metrics)


# -- full tensors --------------------------------------------------------------------------------
#
# Each chunk of a tensor pair is measured by a fixed sequence of numpy passes over buffers that
# stay in L2 (CHUNK_ELEMENTS elements per side, with the scratch arrays about 1.5 MiB in
# float32), and each pass feeds as many metrics as it can: |diff| feeds max abs, allclose, max
# rel, mean rel and ULP; |ref| feeds the allclose bound, the relative and the ULP denominator.
# Tensor data is read a window at a time into one reused buffer per side and thread (pread:
# bounded by the file's size at that moment, so a file cut short cannot fault as a mapping does).

CHUNK_ELEMENTS = 1 << 16
WINDOW_BYTES = 8 << 20  # tensor data read at once, per side and thread: bounds resident memory


class TensorFiles:
    """Reads tensor data out of a dump's step files; keeps a few files open, nothing else in memory.

    Every read is bounded by the file's size at that moment: a file cut short, even while it
    is being read, gives a short read (reported as data cut short), never a fault. Tensor data
    is read, not mapped: a mapped file truncated in place kills the process with SIGBUS.
    """

    def __init__(self, dump: Path) -> None:
        self.dump = Path(dump)
        self.folder = dumpfile.dump_folder(self.dump)
        # file -> (fd, data start), the least recently used first
        self._handles: OrderedDict[str, tuple[int, int]] = OrderedDict()
        self._lock = threading.Lock()  # the threads of one compare open files through one instance
        self._local = threading.local()  # each thread's window buffer
        self.bytes_read = 0

    def _open(self, name: str) -> tuple[int, int]:
        with self._lock:
            hit = self._handles.get(name)
            if hit is not None:
                self._handles.move_to_end(name)
                return hit
            if len(self._handles) >= 8:
                _, (fd, _) = self._handles.popitem(last=False)
                os.close(fd)
            fd = dumpfile.open_inside(self.folder, name, "tensor file")
            try:
                start = dumpfile.data_start(self.folder / name, fd)
            except BaseException:
                os.close(fd)
                raise
            self._handles[name] = (fd, start)
            return self._handles[name]

    def _read(self, entry: Mapping[str, Any], first: int, buffer: memoryview) -> int:
        """Bytes of `entry` from byte `first` into `buffer`; fewer when the file (or the entry) ends sooner."""
        fd, start = self._open(entry["file"])
        want = min(len(buffer), int(entry["nbytes"]) - first)
        if want <= 0:
            return 0
        got = 0
        offset = start + int(entry["start"]) + first
        while got < want:  # a read may return less than asked before the end of the file
            count = os.preadv(fd, [buffer[got:want]], offset + got)
            if count == 0:
                break
            got += count
        self._count(got)
        return got

    def read_into(self, entry: Mapping[str, Any], first: int, buffer: memoryview) -> int:
        """Read bytes of `entry` from byte `first` into `buffer`; returns the number read."""
        return self._read(entry, first, buffer)

    def _count(self, nbytes: int) -> None:
        with self._lock:  # `+=` from two threads can lose an update
            self.bytes_read += nbytes

    def elements(self, entry: Mapping[str, Any], first: int, last: int) -> Any:
        """Elements [first, last) of `entry` as a read-only numpy array of its storage dtype, or
        None when the file ends before them (an interrupted dump, or a file cut short).

        The array is a view of this thread's window buffer: valid until the thread's next call.
        """
        import numpy as np

        storage = _storage_dtype(entry["dtype"])
        item = np.dtype(storage).itemsize
        nbytes = (last - first) * item
        buffer = getattr(self._local, "buffer", None)
        if buffer is None or len(buffer) < nbytes:
            buffer = self._local.buffer = bytearray(max(nbytes, WINDOW_BYTES))
        view = memoryview(buffer)[:nbytes]
        if self._read(entry, first * item, view) != nbytes:
            return None
        array = np.frombuffer(view, dtype=storage, count=last - first)
        array.flags.writeable = False
        return array

    def load(self, entry: Mapping[str, Any]) -> Any:
        """The whole tensor as a numpy array of its dtype widened to float32/float64 (for replay)."""
        import numpy as np

        fd, start = self._open(entry["file"])
        nbytes = int(entry["nbytes"])
        # The manifest's size is checked against the file before anything is allocated.
        if start + int(entry["start"]) + nbytes > os.fstat(fd).st_size:
            raw = None
        else:
            raw = bytearray(nbytes)
            if self.read_into(entry, 0, memoryview(raw)) != nbytes:
                raw = None
        if raw is None:
            from accelport.errors import UserError

            raise UserError(
                f"{self.folder / entry['file']}: tensor data cut short; the dump was interrupted"
            )
        return _widen(
            np.frombuffer(raw, dtype=_storage_dtype(entry["dtype"])), entry["dtype"]
        ).reshape(entry["shape"])

    def close(self) -> None:
        with self._lock:
            for fd, _ in self._handles.values():
                os.close(fd)
            self._handles.clear()


def _storage_dtype(dtype: str) -> Any:
    import numpy as np

    return {
        "float64": np.float64, "float32": np.float32, "float16": np.float16, "bfloat16": np.uint16,
        "int64": np.int64, "int32": np.int32, "int16": np.int16, "int8": np.int8, "uint8": np.uint8, "bool": np.uint8,
    }[dtype]  # fmt: skip


def _widen(raw: Any, dtype: str) -> Any:
    import numpy as np

    if dtype == "bfloat16":
        wide = raw.astype(np.uint32) << 16
        return wide.view(np.float32)
    if dtype == "float32" or dtype == "float64":
        return raw
    if dtype == "float16":
        return raw.astype(np.float32)
    return raw.astype(np.float64)


def _as(raw: Any, dtype: str, wide: Any, work: dict[str, Any], side: str) -> Any:
    """`_widen(raw, dtype)` in the compute dtype `wide`, into this thread's scratch buffers."""
    import numpy as np

    m = raw.shape[0]
    if dtype == "bfloat16":
        bits = _scratch(work, f"bits_{side}", np.uint32)[:m]
        np.left_shift(raw, 16, out=bits, dtype=np.uint32)
        raw = bits.view(np.float32)
    if raw.dtype == wide:
        return raw
    buffer = _scratch(work, f"wide_{side}", wide)[:m]
    np.copyto(buffer, raw, casting="unsafe")
    return buffer


def _scratch(work: dict[str, Any], name: str, dtype: Any) -> Any:
    buffer = work.get(name)
    if buffer is None:
        import numpy as np

        buffer = work[name] = np.empty(work["d"].shape[0], dtype)
    return buffer


class _Accumulator:
    """Running sums over chunks of one tensor pair."""

    def __init__(self) -> None:
        self.n = 0
        self.dd = self.rr = self.tt = 0.0
        self.max_abs = self.amax_ref = self.max_rel = self.max_ulp = 0.0
        self.sum_rel = 0.0
        self.close = 0
        self.nan_mismatch = self.inf_mismatch = 0
        self.nonfinite_ref = 0

    def add(self, part: _Accumulator) -> None:
        self.n += part.n
        self.dd += part.dd
        self.rr += part.rr
        self.tt += part.tt
        self.max_abs = max(self.max_abs, part.max_abs)
        self.amax_ref = max(self.amax_ref, part.amax_ref)
        self.max_rel = max(self.max_rel, part.max_rel)
        self.max_ulp = max(self.max_ulp, part.max_ulp)
        self.sum_rel += part.sum_rel
        self.close += part.close
        self.nan_mismatch += part.nan_mismatch
        self.inf_mismatch += part.inf_mismatch
        self.nonfinite_ref += part.nonfinite_ref


def _chunk_metrics(r: Any, t: Any, tol: Tolerance, acc: _Accumulator, work: dict[str, Any]) -> None:
    import numpy as np

    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        _chunk_metrics_inner(r, t, tol, acc, work)


def _chunk_metrics_inner(
    r: Any, t: Any, tol: Tolerance, acc: _Accumulator, work: dict[str, Any]
) -> None:
    import numpy as np

    m = r.shape[0]
    d, ar, tmp, flags = (work[k][:m] for k in ("d", "ar", "tmp", "flags"))
    rr, tt = float(np.dot(r, r)), float(np.dot(t, t))
    if not (math.isfinite(rr) and math.isfinite(tt)):
        # Slow path, only for chunks holding NaN/Inf: positions must agree, the rest is compared.
        nan_r, nan_t = np.isnan(r), np.isnan(t)
        inf_r, inf_t = np.isinf(r), np.isinf(t)
        acc.nan_mismatch += int(np.count_nonzero(nan_r != nan_t))
        acc.inf_mismatch += int(
            np.count_nonzero((inf_r != inf_t) | (inf_r & inf_t & (np.sign(r) != np.sign(t))))
        )
        both = ~(nan_r | nan_t | inf_r | inf_t)
        acc.nonfinite_ref += int(m - np.count_nonzero(both))
        r, t = r[both], t[both]
        m = r.shape[0]
        if m == 0:
            return
        d, ar, tmp, flags = d[:m], ar[:m], tmp[:m], flags[:m]
        rr, tt = float(np.dot(r, r)), float(np.dot(t, t))
        if not (math.isfinite(rr) and math.isfinite(tt)) and r.dtype == np.float32:
            # Finite values whose squares overflow float32 (finfo.max in a mask): in float64.
            _chunk_metrics_inner(
                r.astype(np.float64),
                t.astype(np.float64),
                tol,
                acc,
                _work_buffers(CHUNK_ELEMENTS, np.float64),
            )
            return
    # From here every value is finite. The cosine needs no r.t pass: with d = t - r,
    # r.t = (r.r + t.t - d.d) / 2 (see _finish).
    acc.n += m
    acc.rr += rr
    acc.tt += tt
    np.subtract(t, r, out=d)
    acc.dd += float(np.dot(d, d))
    np.abs(d, out=d)
    acc.max_abs = max(acc.max_abs, float(d.max()))
    np.abs(r, out=ar)
    acc.amax_ref = max(acc.amax_ref, float(ar.max()))
    np.multiply(ar, tol.rtol, out=tmp)
    np.add(tmp, tol.atol, out=tmp)
    np.less_equal(d, tmp, out=flags)
    acc.close += int(np.count_nonzero(flags))
    # |ref| is finite and never negative, so its bit patterns sort as its values do: an integer
    # maximum on them is the float maximum, without np.maximum's NaN handling (twice the cost).
    bits = work["bits"]
    ar_bits, tmp_bits = ar.view(bits["int"]), tmp.view(bits["int"])
    np.maximum(ar_bits, bits["small"][tol.small_value], out=tmp_bits)
    np.divide(d, tmp, out=tmp)
    if not tol.small_value:
        # Integers have no small-value threshold: an element 0 on both sides is 0/0, and equal.
        np.nan_to_num(tmp, copy=False, nan=0.0, posinf=np.inf)
    acc.max_rel = max(acc.max_rel, float(tmp.max()))
    acc.sum_rel += float(np.dot(tmp, work["ones"][:m]))
    if tol.mantissa_bits:
        # One ULP of the lower-precision dtype at |r| is 2**-mantissa_bits times the power of
        # two at or below |r| (the exponent bits of |r| alone); zeros and subnormals take the
        # smallest normal's. The factor 2**mantissa_bits is applied to the chunk's maximum,
        # in float64: powers of two scale exactly, and one pass fewer.
        np.bitwise_and(ar_bits, bits["exponent"], out=tmp_bits)
        np.maximum(tmp_bits, bits["min_normal"], out=tmp_bits)
        np.divide(d, tmp, out=tmp)
        top = float(tmp.max())
        if top == math.inf:
            # |diff| over a tiny |ref| beyond float32's range (d is finite here): in float64.
            np.bitwise_and(ar_bits, bits["exponent"], out=tmp_bits)
            np.maximum(tmp_bits, bits["min_normal"], out=tmp_bits)
            top = float(np.max(d.astype(np.float64) / tmp.astype(np.float64)))
        acc.max_ulp = max(acc.max_ulp, top * 2.0**tol.mantissa_bits)


def _scan(
    ref_files: TensorFiles,
    ref: Mapping[str, Any],
    test_files: TensorFiles,
    test: Mapping[str, Any],
    tol: Tolerance,
    first: int,
    last: int,
) -> _Accumulator | None:
    """Metrics over elements [first, last) of a tensor pair; None when the data is cut short."""
    import numpy as np

    rdt, tdt = ref["dtype"], test["dtype"]
    wide = np.dtype(
        np.float64
        if "float64" in (rdt, tdt) or rdt not in _FLOAT_RANK or tdt not in _FLOAT_RANK
        else np.float32
    )
    chunk = CHUNK_ELEMENTS
    span = _window_elements(rdt, tdt)
    work = _work_buffers(chunk, wide)
    acc = _Accumulator()
    for low in range(first, last, span):
        high = min(last, low + span)
        r_window = ref_files.elements(ref, low, high)
        t_window = test_files.elements(test, low, high)
        if r_window is None or t_window is None:
            return None
        for at in range(0, high - low, chunk):
            r = _as(r_window[at : at + chunk], rdt, wide, work, "r")
            t = _as(t_window[at : at + chunk], tdt, wide, work, "t")
            _chunk_metrics(r, t, tol, acc, work)
        # Drop every view of the windows now: the next window is read into the same buffers.
        del r_window, t_window, r, t
    return acc


def _window_elements(ref_dtype: str, test_dtype: str) -> int:
    """Elements read at a time: whole chunks, WINDOW_BYTES or less on the wider side."""
    item = max(dumpfile.DTYPES[ref_dtype][1], dumpfile.DTYPES[test_dtype][1])
    return max(CHUNK_ELEMENTS, WINDOW_BYTES // item // CHUNK_ELEMENTS * CHUNK_ELEMENTS)


def compare_tensors(
    ref_files: TensorFiles,
    ref: Mapping[str, Any],
    test_files: TensorFiles,
    test: Mapping[str, Any],
    tol: Tolerance,
    criterion: str = "norm",
    pool: Any = None,
) -> TensorDiff:
    """Stream both tensors chunk by chunk and compute every metric; memory stays at a few MiB per thread.

    With a thread pool, a large tensor's element range is cut into pieces of a window or
    less, at least one per thread, which the threads take as they come free (numpy
    releases the GIL while it computes): a thread slowed by another process on its core
    leaves the rest to the others instead of holding up the tensor.
    """
    total = math.prod(ref["shape"])
    parts = 1
    if pool is not None and total >= 4 * CHUNK_ELEMENTS:
        window = _window_elements(ref["dtype"], test["dtype"])
        parts = max(pool._max_workers, -(-total // window))
    per = -(-total // parts)
    per += (-per) % CHUNK_ELEMENTS
    if parts == 1:
        results = [_scan(ref_files, ref, test_files, test, tol, 0, total)]
    else:
        futures = [
            pool.submit(
                _scan, ref_files, ref, test_files, test, tol, start, min(total, start + per)
            )
            for start in range(0, total, per)
        ]
        results = [f.result() for f in futures]
    if any(r is None for r in results):
        return TensorDiff(False, math.inf, "tensor data cut short (interrupted dump)", "tensor")
    acc = _Accumulator()
    for part in results:
        assert part is not None
        acc.add(part)
    return _finish(acc, total, tol, criterion)


class _SmallBits(dict):
    """Bit pattern (as the compute dtype's integer) of a small-value threshold, by threshold."""

    def __init__(self, wide: Any) -> None:
        super().__init__()
        self.wide = wide

    def __missing__(self, value: float) -> Any:
        import numpy as np

        bits = np.array(value, self.wide).view(_INT_OF[self.wide.name])[()]
        self[value] = bits
        return bits


@cache
def _work_buffers_cached(chunk: int, wide: str, thread: int) -> dict[str, Any]:
    import numpy as np

    dtype = np.dtype(wide)
    integer = np.dtype(_INT_OF[wide])
    exponent = 0x7F800000 if wide == "float32" else 0x7FF0000000000000
    min_normal = np.array(np.finfo(dtype).smallest_normal, dtype).view(integer)[()]
    return {
        "d": np.empty(chunk, dtype),
        "ar": np.empty(chunk, dtype),
        "tmp": np.empty(chunk, dtype),
        "flags": np.empty(chunk, bool),
        "ones": np.ones(chunk, dtype),
        "bits": {
            "int": integer,
            "exponent": integer.type(exponent),
            "min_normal": min_normal,
            "small": _SmallBits(dtype),
        },
    }


_INT_OF = {"float32": "int32", "float64": "int64"}


def _work_buffers(chunk: int, wide: Any) -> dict[str, Any]:
    import numpy as np

    return _work_buffers_cached(chunk, np.dtype(wide).name, threading.get_ident())


def _finish(acc: _Accumulator, total: int, tol: Tolerance, criterion: str) -> TensorDiff:
    n = max(acc.n, 1)
    l2_ref = math.sqrt(acc.rr)
    l2_diff = math.sqrt(acc.dd)
    denom = math.sqrt(acc.rr) * math.sqrt(acc.tt)
    metrics = {
        "max_abs": acc.max_abs,
        "max_rel": acc.max_rel,
        "mean_rel": acc.sum_rel / n,
        "rmse": math.sqrt(acc.dd / n),
        # r.t as (r.r + t.t - d.d) / 2: near cosine 1, where it matters, the errors of r.r
        # and t.t cancel and d.d is small, which a separate r.t sum would not give.
        "cosine": max(-1.0, min(1.0, (acc.rr + acc.tt - acc.dd) / 2 / denom))
        if denom > 0
        else (1.0 if acc.rr == acc.tt == 0 else 0.0),
        "max_ulp": acc.max_ulp,
        "allclose": acc.close / n,
        "nan_mismatch": float(acc.nan_mismatch),
        "inf_mismatch": float(acc.inf_mismatch),
        "rel_l2": l2_diff / l2_ref if l2_ref > 0 else (0.0 if l2_diff == 0 else math.inf),
        "amax_ref": acc.amax_ref,
    }
    if acc.nan_mismatch or acc.inf_mismatch:
        return TensorDiff(
            False,
            math.inf,
            f"NaN/Inf positions differ ({acc.nan_mismatch} NaN, {acc.inf_mismatch} Inf)",
            "tensor",
            metrics,
        )
    allowed_l2 = tol.atol * math.sqrt(n) + tol.rtol * l2_ref
    allowed_max = tol.atol + tol.rtol * acc.amax_ref
    if criterion == "norm":
        allowed_max *= GUARD  # the element guard: one badly wrong element fails the tensor
    ratios = {"l2": _ratio(l2_diff, allowed_l2), "max_abs": _ratio(acc.max_abs, allowed_max)}
    worst = max(ratios, key=lambda k: ratios[k])
    score = ratios[worst]
    passed = score <= 1.0
    reason = ""
    if not passed:
        reason = (
            f"max |diff| {acc.max_abs:.3g} > allowed {allowed_max:.3g}"
            + (f" ({GUARD:g} x (atol + rtol*max|ref|), the element guard)" if criterion == "norm" else "")
            if worst == "max_abs"
            else f"L2 of diff {l2_diff:.3g} > allowed {allowed_l2:.3g} (relative {metrics['rel_l2']:.3g})"
        )
    if criterion == "elementwise" and acc.close < acc.n:
        passed = False
        reason = reason or f"{acc.n - acc.close} of {acc.n} elements outside atol + rtol*|ref|"
        score = max(score, 1.0 + (acc.n - acc.close) / n)
    return TensorDiff(passed, score, reason, "tensor", metrics)


def _ratio(error: float, allowed: float) -> float:
    if allowed > 0:
        return error / allowed
    return 0.0 if error == 0 else math.inf
