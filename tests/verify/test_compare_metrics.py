"""Full-tensor metrics of `accelport compare` against an independent float64 computation.

The compare streams tensors in chunks and windows, over two threads, in float32 where the
data is float32 or narrower; these tests shrink the chunk and the window so that small
tensors cross many of both, and check every metric on awkward data: NaN and Inf (matching
and not), zeros, subnormals, values whose squares overflow float32, bf16 and fp16 against
fp32, float64, integers.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from accelport.verify import capture
from accelport.verify.numerics import metrics
from accelport.verify.numerics.compare import compare_dumps

N = 20_011  # not a multiple of any chunk: the last chunk is short


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    # 1024-element chunks and 8 KiB windows: about 20 chunks, several windows and (over 4
    # chunks) a split between two threads, as a large tensor gets with the real sizes.
    monkeypatch.setattr(metrics, "CHUNK_ELEMENTS", 1 << 10)
    monkeypatch.setattr(metrics, "WINDOW_BYTES", 8 << 10)


def _base(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(N).astype(np.float32)
    b = (a * np.float32(1.0001) + rng.standard_normal(N).astype(np.float32) * np.float32(1e-5)).astype(
        np.float32
    )
    return a, b


def _special() -> tuple[np.ndarray, np.ndarray]:
    a, b = _base(1)
    a[::97], b[::89] = 0.0, 0.0  # zeros on one side or both
    a[5::1000], b[5::1000] = np.float32(1e-40), np.float32(3e-40)  # subnormals
    a[7], b[7] = np.nan, np.nan  # NaN on both sides: agrees
    a[3000] = np.nan  # NaN on REF only
    a[5000], b[5000] = np.inf, np.inf  # same Inf
    a[9], b[9] = -np.inf, np.inf  # Inf of the other sign
    b[N - 1] = np.inf  # Inf on TEST only, in the short last chunk
    return a, b


def _huge() -> tuple[np.ndarray, np.ndarray]:
    a, b = _base(2)
    a[11], b[11] = np.float32(3e38), np.float32(3.1e38)  # finite, square overflows float32
    return a, b


def _cases() -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    a, b = _base()
    ints = np.random.default_rng(3).integers(-1000, 1000, N)
    ints_b = ints.copy()
    ints_b[123] += 1
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    return {
        "float32": (ta, tb),
        "float32 NaN Inf zeros subnormals": tuple(map(torch.from_numpy, _special())),
        "float32 huge": tuple(map(torch.from_numpy, _huge())),
        "bfloat16 vs float32": (ta.bfloat16(), tb),
        "float16 vs float32": (ta.half(), tb),
        "bfloat16": (ta.bfloat16(), tb.bfloat16()),
        "float64": (ta.double(), tb.double() + 1e-9),
        "float64 vs float32": (ta.double(), tb),
        "int64": (torch.from_numpy(ints), torch.from_numpy(ints_b)),
        "int32": (torch.from_numpy(ints).int(), torch.from_numpy(ints_b).int()),
        "uint8": (torch.from_numpy(ints % 200).to(torch.uint8), torch.from_numpy(ints_b % 200).to(torch.uint8)),
        "zero tensor": (torch.zeros(N), torch.zeros(N)),
    }  # fmt: skip


def _dtype(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


def expected(r_t: torch.Tensor, t_t: torch.Tensor) -> dict[str, float]:
    """Every metric by its definition, in float64 on the upcast values, with no chunking."""
    tol = metrics.tolerance_for(_dtype(r_t), _dtype(t_t))
    r, t = r_t.double().numpy(), t_t.double().numpy()
    nan_r, nan_t, inf_r, inf_t = np.isnan(r), np.isnan(t), np.isinf(r), np.isinf(t)
    nan_mismatch = np.count_nonzero(nan_r != nan_t)
    inf_mismatch = np.count_nonzero((inf_r != inf_t) | (inf_r & inf_t & (np.sign(r) != np.sign(t))))
    keep = np.isfinite(r) & np.isfinite(t)
    r, t = r[keep], t[keep]
    d = np.abs(t - r)
    with np.errstate(divide="ignore", invalid="ignore"):
        # An element equal on both sides is off by 0, also where |ref| is 0 (integers have
        # no small-value threshold).
        rel = np.where(d == 0, 0.0, d / np.maximum(np.abs(r), tol.small_value))
        # One ULP of the lower-precision dtype at |ref|: 2**-mantissa_bits times the power of
        # two at or below |ref|, no smaller than the compute dtype's smallest normal.
        floor = 2.0**-1022 if "float64" in (_dtype(r_t), _dtype(t_t)) else 2.0**-126
        power = np.ldexp(1.0, np.frexp(np.maximum(np.abs(r), floor))[1] - 1)
        ulp = d / (power * 2.0**-tol.mantissa_bits) if tol.mantissa_bits else np.zeros(1)
    norm_r, norm_t = np.linalg.norm(r), np.linalg.norm(t)
    return {
        "max_abs": d.max(),
        "max_rel": rel.max(),
        "mean_rel": rel.mean(),
        "rmse": math.sqrt(np.mean(d**2)),
        "cosine": r @ t / (norm_r * norm_t) if norm_r * norm_t > 0 else 1.0,
        "max_ulp": ulp.max(),
        "allclose": np.mean(d <= tol.atol + tol.rtol * np.abs(r)),
        "nan_mismatch": nan_mismatch,
        "inf_mismatch": inf_mismatch,
        "rel_l2": np.linalg.norm(d) / norm_r if norm_r > 0 else 0.0,
        "amax_ref": np.abs(r).max(),
    }


def _dump(folder: Path, tensors: list[torch.Tensor]) -> Path:
    with capture(folder, step_on="manual", tensors=True, param_checksums=False):
        for tensor in tensors:
            tensor.clone()
    return folder


@pytest.fixture(scope="module")
def dumps(tmp_path_factory) -> tuple[Path, Path, dict]:
    cases = _cases()
    root = tmp_path_factory.mktemp("metrics")
    ref = _dump(root / "ref", [r for r, _ in cases.values()])
    test = _dump(root / "test", [t for _, t in cases.values()])
    return ref, test, cases


def _float(value) -> float:
    return float(value)  # JSON keeps non-finite numbers as 'nan' / 'inf'


@pytest.mark.parametrize("threads", [1, 2])
def test_every_metric_matches_float64_by_definition(dumps, threads):
    ref, test, cases = dumps
    with compare_dumps(ref, test, threads=threads) as result:
        rows = [row for row in result.rows() if row["op"] == "aten.clone.default"]
    assert len(rows) == len(cases)
    for (name, (r, t)), row in zip(cases.items(), rows, strict=True):
        assert row["source"] == "tensor", name
        got = {k: _float(v) for k, v in row["metrics"].items()}
        want = expected(r, t)
        n = int(np.count_nonzero(np.isfinite(r.double().numpy()) & np.isfinite(t.double().numpy())))
        for key in ("nan_mismatch", "inf_mismatch"):
            assert got[key] == want[key], (name, key)
        # Differences are taken in float32 for float32-or-narrower data, sums are float32
        # within a chunk and float64 across chunks; maxima and ULP are exact.
        for key in ("max_abs", "max_rel", "max_ulp", "amax_ref"):
            assert got[key] == pytest.approx(want[key], rel=1e-6, nan_ok=True), (name, key)
        for key in ("mean_rel", "rmse", "rel_l2"):
            assert got[key] == pytest.approx(want[key], rel=1e-5, nan_ok=True), (name, key)
        assert got["cosine"] == pytest.approx(want["cosine"], abs=1e-9), name
        assert -1.0 <= got["cosine"] <= 1.0, name
        # One element on the border of atol + rtol*|ref| may fall either way in float32.
        assert got["allclose"] == pytest.approx(want["allclose"], abs=1.5 / n), name


def test_nan_inf_mismatches_are_counted_and_fail(dumps):
    ref, test, cases = dumps
    names = list(cases)
    with compare_dumps(ref, test, threads=2) as result:
        rows = [row for row in result.rows() if row["op"] == "aten.clone.default"]
    special = rows[names.index("float32 NaN Inf zeros subnormals")]
    assert special["metrics"]["nan_mismatch"] == 1 and special["metrics"]["inf_mismatch"] == 2
    assert special["status"] == "fail" and "NaN/Inf positions differ (1 NaN, 2 Inf)" in special["reason"]
    assert rows[names.index("float32")]["status"] == "pass"
    assert rows[names.index("bfloat16 vs float32")]["status"] == "pass"


def test_a_zero_ref_element_has_a_finite_ulp_distance_beyond_float32_range(tmp_path):
    # |diff| 5 at |ref| 0 is 5 / 2**-149 ULPs, about 3.5e45: more than float32 holds.
    r = torch.zeros(N)
    t = torch.zeros(N)
    t[4000] = 5.0
    with compare_dumps(_dump(tmp_path / "r", [r]), _dump(tmp_path / "t", [t])) as result:
        row = next(row for row in result.rows() if row["op"] == "aten.clone.default")
    assert _float(row["metrics"]["max_ulp"]) == pytest.approx(5.0 * 2.0**149, rel=1e-12)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("where", [0, 4095, N - 1])
def test_one_element_off_in_a_large_tensor_fails(tmp_path, threads, where):
    a, _ = _base(4)
    b = a.copy()
    b[where] += np.float32(0.5)  # elsewhere bit-identical
    ref = _dump(tmp_path / "r", [torch.from_numpy(a)])
    test = _dump(tmp_path / "t", [torch.from_numpy(b)])
    with compare_dumps(ref, test, threads=threads) as result:
        assert not result.passed
        (row,) = (row for row in result.rows() if row["op"] == "aten.clone.default")
    assert row["status"] == "fail"
    assert row["metrics"]["max_abs"] == pytest.approx(0.5, rel=1e-6)
    assert row["metrics"]["allclose"] == pytest.approx(1 - 1 / N)


def test_tensor_data_cut_short_fails_that_tensor(tmp_path):
    a, b = _base(5)
    ref = _dump(tmp_path / "r", [torch.from_numpy(a)])
    test = _dump(tmp_path / "t", [torch.from_numpy(b)])
    (tensor_file,) = (test / "tensors").glob("*.safetensors")
    with open(tensor_file, "r+b") as handle:
        handle.truncate(tensor_file.stat().st_size - 4096)
    with compare_dumps(ref, test) as result:
        assert not result.passed
        (row,) = (row for row in result.rows() if row["op"] == "aten.clone.default")
    assert row["status"] == "fail" and "cut short" in row["reason"]


