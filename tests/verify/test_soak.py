"""soak: planted leak, hang, NaN and spike are caught; a clean training run passes."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest

from accelport.verify.stability import soak

torch = pytest.importorskip("torch", reason="soak's training-loop tests need torch (pip install 'accelport[torch]')")


def _training_step():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(64, 16), torch.randn(64, 1)

    def step():
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1e9)
        optimizer.step()
        return {"loss": loss, "grad_norm": norm}

    return step


def test_clean_training_run_passes(planted_clock):
    clock = planted_clock
    step = _training_step()

    def steady():
        clock.now += 0.005  # every step takes 5 ms
        return step()

    result = soak.run(steady, steps=60, clock=clock)
    assert result.failures() == []
    assert result.passed and result.to_dict()["verdict"] == "pass"
    assert "rss" in result.slopes()
    assert [s["dt"] for s in result.measured()] == pytest.approx([0.005] * 55)


def test_step_times_come_from_the_real_clock_by_default():
    result = soak.run(_training_step(), steps=10)
    assert all(s["dt"] > 0 for s in result.measured())  # perf_counter only moves forward; no threshold on its figures


@pytest.mark.parametrize(
    ("base_s", "per_step_s", "caught"),
    [
        (0.002, 0.0004, True),  # 0.4 ms slower each step: 14 ms (about 130%) slower over the 35 measured steps
        (0.002, 0.0, False),  # the control: steady steps
        (0.0001, 0.00005, False),  # 1.7 ms slower (much more than 25%) but under the 2 ms floor: load noise, not drift
        (0.050, 0.0002, False),  # 7 ms slower, above the floor, but only 14% of a 50 ms step
    ],
)
def test_planted_step_time_drift_is_detected(planted_clock, base_s, per_step_s, caught):
    clock = planted_clock
    step = _training_step()
    count = [0]

    def slowing():
        count[0] += 1
        clock.now += base_s + per_step_s * count[0]
        return step()

    result = soak.run(slowing, steps=40, clock=clock)
    drift = [f for f in result.failures() if f.startswith("step time drifts up")]
    assert bool(drift) is caught, result.failures()
    assert result.passed is not caught
    if caught:
        assert result.slopes()["step_time"].per_step == pytest.approx(per_step_s)


def test_planted_leak_is_detected():
    step = _training_step()
    kept = []

    def leaky():
        kept.append("x" * (1 << 20))  # a list growing every step
        return step()

    result = soak.run(leaky, steps=40)
    assert not result.passed
    assert any(("rss grows" in f or "heap grows" in f) and "leak" in f for f in result.failures())


def test_planted_hang_is_detected_with_the_stack_of_the_blocked_step():
    step = _training_step()
    count = [0]

    def blocks():
        count[0] += 1
        if count[0] == 8:
            time.sleep(120)  # a step that does not return
        return step()

    # Had the watchdog not broken the sleep, the step would have returned after 120 s and the run gone on to 40 steps.
    result = soak.run(blocks, steps=40, limits=soak.SoakLimits(hang_timeout_s=2.0))
    assert result.stop_reason == "hang" and count[0] == 8
    assert result.hang["last_step"] == 6  # the step before the planted one: no step timed out by load alone
    assert any(f.startswith("hang:") for f in result.failures())
    assert "in blocks" in result.hang["stacks"]


def test_planted_nan_stops_the_run_and_fails():
    step = _training_step()
    count = [0]

    def poisoned():
        count[0] += 1
        out = step()
        return {"loss": out["loss"] * float("nan")} if count[0] == 12 else out

    result = soak.run(poisoned, steps=40)
    assert result.stop_reason == "nonfinite"
    assert result.nonfinite == {"step": 11, "what": "loss", "value": "nan"}
    assert not result.passed


def test_loss_spike_and_oom_are_caught():
    losses = iter([1.0 - 0.001 * i for i in range(20)] + [9.0] + [0.98] * 10)
    spiky = soak.run(lambda: next(losses), steps=31)
    assert [s["step"] for s in spiky.spikes] == [20]
    assert not spiky.passed

    def oom():
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    result = soak.run(oom, steps=5)
    assert result.stop_reason == "oom" and "Tried to allocate" in result.oom["message"]


def test_theil_sen_finds_the_slope_despite_outliers():
    xs = list(range(50))
    ys = [3.0 * x + 1 for x in xs]
    ys[10] = 500.0
    ys[30] = -400.0
    slope, low, high = soak.theil_sen(xs, ys)
    assert slope == pytest.approx(3.0)
    assert low <= 3.0 <= high


def test_cli_soak_catches_a_hang_in_a_script_and_prints_its_stack(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import time
        from accelport.verify.perf import bench
        for i in range(1000):
            if i == 6:
                time.sleep(3600)  # planted hang
            bench.step(loss=1.0)
    """))
    done = subprocess.run([sys.executable, "-m", "accelport", "soak", "--steps", "50", "--hang-timeout", "2s", "--quiet",
                           "--", sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "FAIL  hang" in done.stdout
    assert "train.py\", line 6" in done.stdout  # faulthandler's stack of the blocked line


def test_cli_soak_clean_script_passes_and_bad_duration_is_a_usage_error(cli, tmp_path):
    script = tmp_path / "ok.py"
    script.write_text("from accelport.verify import bench\nfor i in range(30):\n    bench.step(loss=1.0 / (i + 1))\n")
    done = subprocess.run([sys.executable, "-m", "accelport", "soak", "--steps", "30", "--quiet", "--", sys.executable, str(script)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "soak: PASS" in done.stdout
    assert cli("soak", "--duration", "soon", "--", "true").code == 2
