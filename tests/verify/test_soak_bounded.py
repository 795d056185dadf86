"""soak keeps bounded memory on runs of any length; needs no torch (synthetic samples)."""

from __future__ import annotations

import itertools

import pytest

from accelport.verify import soak


def _sample(step: int, rss: float, dt: float = 0.01) -> dict:
    return {"step": step, "t": 1000.0 + 0.01 * step, "dt": dt, "rss": rss}


def test_a_million_samples_keep_a_bounded_evenly_spaced_subset_and_exact_totals():
    limits = soak.SoakLimits(warmup_steps=5, max_samples=1024)
    samples = soak.Samples(limits.warmup_steps, limits.max_samples)
    total = 1_000_000
    for step in range(total):
        # A planted leak of 64 bytes per step (61 MiB over the run) and one very slow step.
        samples.append(_sample(step, 100e6 + 64.0 * step, dt=2.0 if step == 777_777 else 0.01))
        assert len(samples.kept) <= limits.max_samples
    assert len(samples) == total
    assert len(samples.warm) == 5 and len(samples.kept) > limits.max_samples // 2
    kept_steps = [s["step"] for s in samples.measured()]
    assert {b - a for a, b in itertools.pairwise(kept_steps[:-1])} == {samples.stride}  # evenly spaced, then the last
    assert kept_steps[0] == 5 and kept_steps[-1] == total - 1
    result = soak.SoakResult(samples=samples, limits=limits, stop_reason="steps")
    data = result.to_dict()
    assert data["steps"] == total
    assert len(data["samples"]) <= 5 + limits.max_samples + 1
    assert data["duration_s"] == pytest.approx(0.01 * (total - 1))
    assert data["step_time_max_s"] == 2.0  # exact, though that step was not kept
    assert data["step_time_mean_s"] == pytest.approx((0.01 * (total - 6) + 2.0) / (total - 5))
    assert data["peak"]["rss"] == 100e6 + 64.0 * (total - 1)
    # The fits on the kept samples still see the leak, with its true size.
    assert data["slopes"]["rss"]["per_step"] == pytest.approx(64.0)
    assert any(f.startswith("rss grows") for f in data["failures"])


def test_a_flat_long_run_passes_and_in_process_soak_uses_the_bound():
    limits = soak.SoakLimits(warmup_steps=2, max_samples=16)
    samples = soak.Samples(limits.warmup_steps, limits.max_samples)
    for step in range(50_000):
        samples.append(_sample(step, 100e6 + (step % 7)))
    assert soak.SoakResult(samples=samples, limits=limits, stop_reason="steps").failures() == []
    result = soak.run(lambda: 1.0, steps=300, limits=limits)
    data = result.to_dict()
    assert data["steps"] == 300 and data["sample_stride"] > 1
    assert len(data["samples"]) <= 2 + 16 + 1
    assert data["samples"][-1]["step"] == 299
