"""The statistics of `accelport dump` on the CPU: the compiled one-pass kernel and the numpy fallback, checked against float64."""

from __future__ import annotations

import logging
import math
import shutil

import numpy as np
import pytest
import torch

import accelport.native
from accelport.verify import capture
from accelport.verify.numerics import dumpfile, native
from accelport.verify.numerics.dump import _Stats

BIG = torch.finfo(torch.float32).max


def _cases() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    base = torch.randn(3, 1000, 7, generator=g)
    with_holes = torch.randn(50_003, generator=g)
    with_holes[::97] = 0.0
    with_holes[5] = with_holes[40_000] = float("nan")
    with_holes[17] = float("inf")
    with_holes[30_001] = -float("inf")
    mask = torch.zeros(64, 64)
    mask.masked_fill_(torch.ones(64, 64, dtype=torch.bool).triu(1), -float("inf"))
    huge = torch.full((5000,), BIG)
    huge[1::2] = -BIG
    huge[7] = 1.0
    qkv = torch.randn(4, 33, 3 * 40, generator=g)
    # Zeros in some 2048-element blocks only (the kernel counts zeros only in a block whose
    # smallest |x| is 0): at a block's last lane, a -0.0 alone, and one block of ReLU output.
    sparse_zeros = torch.randn(5 * 2048 + 9, generator=g)
    sparse_zeros[2047] = 0.0
    sparse_zeros[3 * 2048 + 100] = -0.0
    sparse_zeros[4 * 2048 : 5 * 2048].clamp_(min=0.0)
    # Short rows are gathered into blocks that span rows: NaN, Inf and zeros in them.
    qkv_holes = torch.randn(4, 70, 3 * 40, generator=g)
    qkv_holes[0, 3, 45] = float("nan")
    qkv_holes[2, 60, 79] = float("-inf")
    qkv_holes[3, 69, 40] = 0.0
    return {
        "contiguous": base,
        "nan_inf_zero": with_holes,
        "causal_mask": mask,  # half -inf: every block takes the masked path
        "all_negative": -base.abs() - 1.0,
        "all_zero": torch.zeros(4099),
        "sparse_zeros": sparse_zeros,
        "negative_zeros": -torch.zeros(3000),
        "all_nan": torch.full((37,), float("nan")),
        "near_float32_max": huge,  # float32 lane sums overflow: summed again in float64
        "transposed": base.transpose(0, 2),  # fills its memory: one run
        "split_part": qkv.split(40, dim=2)[1],  # gaps between rows: walked row by row
        "split_with_holes": qkv_holes.split(40, dim=2)[1],  # rows gathered across 2048-element blocks
        "long_rows": torch.randn(3, 5000, generator=g)[:, 100:4700],  # rows of a block or more: in place
        "every_other": base[:, :, ::2],  # no dimension with stride 1: copied slab by slab
        "expanded": torch.randn(1, 300, generator=g).expand(6, 300),  # stride 0
        "scalar": torch.tensor(-2.5),
        "odd_length": torch.randn(16 * 128 + 15, generator=g),
        "large": torch.cat([with_holes] * 24),  # numpy sweeps it in two halves on two threads
        "empty": torch.zeros(0, 5),
        "bfloat16": with_holes.to(torch.bfloat16),
        "bfloat16_strided": base.to(torch.bfloat16)[:, 10:900],
        "float16": base.to(torch.float16),
        "float64": with_holes.double() * 1e150,  # beyond float32, squares within float64
        "int64": torch.randint(-5, 5, (10_001,), generator=g),
        "uint8": torch.randint(0, 3, (999,), generator=g, dtype=torch.uint8),
        "bool": torch.rand(1000, generator=g) > 0.3,
    }


def _reference(t: torch.Tensor) -> list[float]:
    """The eight statistics in float64 with plain numpy, from the logical elements."""
    v = t.detach().to(torch.float64).contiguous().numpy().reshape(-1)
    finite = v[np.isfinite(v)]
    nan, inf = float(np.isnan(v).sum()), float(np.isinf(v).sum())
    if v.size == 0:
        return [math.nan, math.nan, math.nan, 0.0, math.nan, 0.0, 0.0, 0.0]
    if finite.size == 0:
        return [math.nan, math.nan, math.nan, math.nan, math.nan, nan, inf, 0.0]
    return [
        float(finite.min()),
        float(finite.max()),
        float(finite.mean()),
        float(np.sqrt(np.sum(finite * finite))),
        float(np.abs(finite).mean()),
        nan,
        inf,
        float((finite == 0).sum()),
    ]


def _assert_matches(got: list[float], want: list[float], name: str) -> None:
    assert len(got) == 8, name
    fields = dict(zip(dumpfile.STAT_FIELDS, got, strict=True))
    ref = dict(zip(dumpfile.STAT_FIELDS, want, strict=True))
    for key in ("min", "max", "nan", "inf", "zero"):  # exact: no rounding involved
        assert fields[key] == ref[key] or (math.isnan(fields[key]) and math.isnan(ref[key])), (
            name,
            key,
            fields[key],
            ref[key],
        )
    scale = ref["abs_mean"]
    for key in ("mean", "abs_mean", "l2"):
        if math.isnan(ref[key]):
            assert math.isnan(fields[key]), (name, key)
            continue
        # float32 partial sums, float64 totals: the mean is checked against the magnitude
        # (it may be near zero by cancellation), the others relative to themselves.
        tolerance = 1e-6 * (scale if key == "mean" else abs(ref[key])) + 1e-300
        assert abs(fields[key] - ref[key]) <= tolerance, (name, key, fields[key], ref[key])


@pytest.fixture
def numpy_only(monkeypatch):
    monkeypatch.setenv(native.ENV_VAR, "0")
    return _Stats(host=True)


def _compiler_present() -> bool:
    return any(shutil.which(name) for name in ("cc", "gcc", "clang"))


def _have_compiled() -> _Stats:
    stats = _Stats(host=True)
    if stats.native is None:
        # With a compiler, no kernel means it failed to build or failed its self-check.
        assert not _compiler_present(), (
            "a C compiler is here but the statistics kernel did not load"
        )
        pytest.skip("no C compiler here: only the numpy path can be checked")
    return stats


@pytest.mark.parametrize("name", sorted(_cases()))
def test_compiled_kernel_matches_float64(name):
    t = _cases()[name]
    _assert_matches(_have_compiled().compute(t), _reference(t), name)


@pytest.mark.parametrize("name", sorted(_cases()))
def test_compiled_kernel_split_across_threads_matches_float64(name, monkeypatch):
    stats = _have_compiled()
    if not stats.native.openmp or torch.get_num_threads() < 2:
        pytest.skip("the kernel runs on one thread here")
    monkeypatch.setattr(native, "PARALLEL_MIN", 1)  # every contiguous tensor, however small
    t = _cases()[name]
    _assert_matches(stats.compute(t), _reference(t), name)


@pytest.mark.parametrize("name", sorted(_cases()))
def test_numpy_fallback_matches_float64(name, numpy_only):
    assert numpy_only.native is None
    t = _cases()[name]
    _assert_matches(numpy_only.compute(t), _reference(t), name)


@pytest.mark.parametrize("name", sorted(_cases()))
def test_device_batched_statistics_match_float64(name):
    """The accelerator path (sums queued on the device, one copy, finished on the host), run on the CPU."""
    stats = _Stats(host=False)
    t = _cases()[name]
    index = stats.compute(t)
    if isinstance(index, list):  # empty tensors are answered at once
        _assert_matches(index, _reference(t), name)
        return
    _assert_matches(stats.resolve()[index], _reference(t), name)


def test_kernel_reads_the_tensor_it_is_given_not_its_whole_storage():
    stats = _have_compiled()
    storage = torch.full((10, 100), 1000.0)
    storage[3:5, 20:30] = torch.arange(20, dtype=torch.float32).reshape(2, 10) - 10
    window = storage[3:5, 20:30]  # strided, offset into a larger buffer of other values
    got = stats.compute(window)
    assert got[:2] == [-10.0, 9.0] and got[7] == 1.0
    assert got[2] == pytest.approx(-0.5)


def test_a_capture_writes_the_same_statistics_with_and_without_the_compiled_kernel(
    tmp_path, monkeypatch
):
    _have_compiled()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 300, generator=g)
    x[0, 0] = float("nan")

    def run(folder):
        with capture(folder, step_on="manual"):
            y = torch.nn.functional.gelu(x @ x.T)
            torch.softmax(y.masked_fill(y > 5, -float("inf")), dim=-1)
        return [
            t["stats"]
            for r in dumpfile.iter_records(folder)
            if r.get("k") == "op"
            for t in r["out"]
        ]

    fast = run(tmp_path / "fast")
    monkeypatch.setenv(native.ENV_VAR, "0")
    slow = run(tmp_path / "slow")
    assert len(fast) == len(slow) > 3
    for a, b in zip(fast, slow, strict=True):
        if a is None:
            assert b is None
            continue
        a, b = [float(v) for v in a], [float(v) for v in b]
        assert np.allclose(a, b, rtol=1e-5, atol=1e-7, equal_nan=True), (a, b)


def test_no_compiler_means_numpy_statistics_and_one_log_line(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # nothing built yet
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    monkeypatch.delenv(native.ENV_VAR, raising=False)
    native.reset()
    try:
        with caplog.at_level(logging.INFO, logger="accelport.verify.numerics.native"):
            stats = _Stats(host=True)
        assert stats.native is None
        assert "using numpy" in caplog.text
        t = _cases()["nan_inf_zero"]
        _assert_matches(stats.compute(t), _reference(t), "fallback")
        with capture(tmp_path / "d", step_on="manual"):
            torch.relu(t)
        relu = next(
            r for r in dumpfile.iter_records(tmp_path / "d") if r.get("op") == "aten.relu.default"
        )
        _assert_matches([float(v) for v in relu["in"][0]["stats"]], _reference(t), "captured")
    finally:
        native.reset()


@pytest.mark.skipif(not _compiler_present(), reason="no C compiler")
def test_kernel_is_built_once_into_the_cache_and_then_loaded(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(native.ENV_VAR, raising=False)
    monkeypatch.delenv("CC", raising=False)
    native.reset()
    try:
        first = native.kernels()
        assert (
            first is not None and first.path.parent == tmp_path / "cache" / "accelport" / "native"
        )
        built = first.path.stat().st_mtime_ns
        native.reset()
        monkeypatch.setattr(accelport.native, "build_library", lambda *a: pytest.fail("built a second time"))
        second = native.kernels()
        assert second is not None and second.path == first.path
        assert second.path.stat().st_mtime_ns == built
    finally:
        native.reset()


def test_a_library_that_gets_the_self_check_wrong_is_refused(monkeypatch):
    kernels = _have_compiled().native

    class Wrong:
        def sweep(self, pointer, count, dtype, out):
            kernels.sweep(pointer, count, dtype, out)
            out[7] += 1  # one zero too many

    with pytest.raises(RuntimeError, match="self-check"):
        native._self_check(Wrong())


@pytest.mark.skipif(not _compiler_present(), reason="no C compiler")
def test_without_an_openmp_runtime_the_kernel_is_built_serial_and_still_right(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(native.ENV_VAR, raising=False)
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setattr(native, "_openmp_runtime", lambda: None)
    native.reset()
    try:
        stats = _Stats(host=True)
        assert stats.native is not None and not stats.native.openmp
        t = _cases()["large"]
        _assert_matches(stats.compute(t), _reference(t), "serial")
    finally:
        native.reset()
