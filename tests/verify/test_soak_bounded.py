"""soak keeps bounded memory on runs of any length; needs no torch (synthetic samples)."""

from __future__ import annotations

import itertools

import pytest

from accelport.errors import UserError
from accelport.verify.stability import soak


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


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--steps", "0"], "--steps 0: must be 1 <= steps"),
        (["--duration", "0s"], "duration '0s' must be positive"),
        (["--duration=-5m"], "duration '-5m' must be positive"),
        (["--steps", "5", "--hang-timeout", "0"], "duration '0' must be positive"),
        (["--steps", "5", "--warmup-steps", "-1"], "--warmup-steps -1: must be 0 <= warmup-steps"),
        (["--steps", "5", "--max-time-drift", "0"], "--max-time-drift 0: must be 0 < max-time-drift"),
        (["--steps", "5", "--min-time-drift-ms", "-1"], "--min-time-drift-ms -1: must be 0 <= min-time-drift-ms"),
        (["--steps", "5", "--max-memory-growth", "-16"], "--max-memory-growth -16: must be 0 < max-memory-growth"),
        (["--steps", "5", "--spike-z", "0"], "--spike-z 0: must be 0 < spike-z"),
        (["--steps", "5", "--max-spikes", "-1"], "--max-spikes -1: must be 0 <= max-spikes"),
        (["--steps", "5", "--save", "{tmp}/missing/s.json"], "folder {tmp}/missing does not exist"),
        ([], "soak needs --steps or --duration"),
        (["--steps", "12"], None),  # the control: valid options run the command
    ],
)
def test_cli_soak_out_of_range_options_are_one_line_usage_errors(cli, tmp_path, arguments, message):
    import sys

    marker = tmp_path / "ran"
    script = tmp_path / "loop.py"
    script.write_text(f"open({str(marker)!r}, 'w')\nfrom accelport.verify.perf import bench\nfor _ in range(12):\n    bench.step(loss=1.0)\n")
    done = cli("soak", *[a.format(tmp=tmp_path) for a in arguments], "--quiet", "--", sys.executable, str(script))
    if message is None:
        assert done.code == 0 and marker.exists(), done.out + done.err
        return
    assert done.code == 2, done.out + done.err
    assert message.format(tmp=tmp_path) in done.err and len(done.err.strip().splitlines()) == 1, done.err
    assert not marker.exists()  # refused before the command ran


def test_soak_api_refuses_an_empty_run():
    with pytest.raises(UserError, match=r"^steps=0: must be 1 <= steps$"):
        soak.run(lambda: 1.0, steps=0)
    with pytest.raises(UserError, match=r"^duration_s=0 s: must be positive"):
        soak.run(lambda: 1.0, duration_s=0.0)
    with pytest.raises(UserError, match=r"^soak needs steps or duration_s"):
        soak.run(lambda: 1.0)
