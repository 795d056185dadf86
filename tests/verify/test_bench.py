"""bench: CI of the median, stop rule, baseline comparison, the step marker under `accelport bench`."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

import pytest

from accelport.errors import UserError
from accelport.verify.perf import bench


def test_bootstrap_ci_brackets_the_median_and_is_deterministic():
    values = [1.0, 1.1, 0.9, 1.05, 0.95, 1.2, 0.8, 1.0, 1.02, 0.98]
    low, high = bench.bootstrap_median_ci(values)
    assert low <= 1.0 <= high
    assert (low, high) == bench.bootstrap_median_ci(values)
    assert bench.bootstrap_median_ci([2.0]) == (2.0, 2.0)


def test_run_measures_planted_step_times_and_stops_on_its_rule(planted_clock):
    clock = planted_clock

    def step():
        clock.now += 0.002

    result = bench.run(step, rule=bench.StopRule(warmup=2, min_steps=5, max_steps=12, budget_s=10), samples_per_step=8,
                       clock=clock)
    data = result.to_dict()
    assert data["median_s"] == pytest.approx(0.002)
    assert data["steps"] == 5 and data["warmup"] == 2  # identical steps: the CI is tight at min_steps
    assert data["stop_reason"] == "converged"
    assert data["samples_per_s"]["median"] == pytest.approx(8 / 0.002)


def test_run_times_a_sleeping_step_with_the_real_clock_by_default():
    result = bench.run(lambda: time.sleep(0.002), rule=bench.StopRule(warmup=1, min_steps=3, max_steps=3, budget_s=1e9))
    assert len(result.times_s) == 3
    assert all(t >= 0.002 for t in result.times_s)  # a sleep never ends early; no upper bound: load may slow any step


def _result(median: float, samples=None) -> bench.BenchResult:
    times = [median * f for f in (0.98, 1.0, 1.02, 0.99, 1.01, 1.0, 1.0, 0.97, 1.03, 1.0)]
    return bench.BenchResult(scenario="s", times_s=times, warmup=0, stop_reason="converged", samples_per_step=samples)


def test_compare_passes_at_the_floor_and_fails_below():
    baseline = _result(0.010)
    slower = _result(0.020)
    assert bench.compare(slower, baseline, floor=0.6).passed is False
    assert bench.compare(slower, baseline, floor=0.4).passed is True
    comparison = bench.compare(slower, baseline)
    assert comparison.ratio == pytest.approx(0.5)
    assert comparison.ci_low <= 0.5 <= comparison.ci_high
    # A different batch is a different scenario: refused unless allowed, then compared per sample
    # (a twice larger batch in twice the time is even) with the difference listed.
    with pytest.raises(UserError, match=r"different scenarios \(samples per step \(batch\) 64 vs 32\)"):
        bench.compare(_result(0.020, samples=64), _result(0.010, samples=32))
    allowed = bench.compare(_result(0.020, samples=64), _result(0.010, samples=32), allow_mismatch=True)
    assert allowed.ratio == pytest.approx(1.0) and allowed.mismatch == ("samples per step (batch) 64 vs 32",)
    assert bench.compare(_result(0.010, samples=32), _result(0.010, samples=32)).mismatch == ()


def _noisy(median: float, steps: int, spread: float, seed: int) -> bench.BenchResult:
    import random

    rng = random.Random(seed)
    times = [median * (1 + rng.uniform(-spread, spread)) for _ in range(steps)]
    return bench.BenchResult(scenario="s", times_s=times, warmup=0, stop_reason="converged")


def test_a_floor_inside_the_ci_is_inconclusive_and_says_how_many_steps_would_decide():
    # 0.70x of the baseline with +-40% noise per step: a floor of 0.6 lies inside the CI.
    baseline, test = _noisy(0.010, 12, 0.4, 1), _noisy(0.010 / 0.70, 12, 0.4, 2)
    comparison = bench.compare(test, baseline, floor=0.6)
    assert comparison.ci_low < 0.6 < comparison.ci_high and comparison.ratio > 0.6
    assert comparison.verdict == "inconclusive" and comparison.passed is False  # the old rule said pass
    more = comparison.steps_to_decide
    assert more and more > 0
    assert f"about {more} more steps per side" in comparison.describe()
    data = comparison.to_dict()
    assert data["verdict"] == "inconclusive" and data["steps_to_decide"] == more
    # Measuring that many more steps of the same machines decides it.
    longer = bench.compare(_noisy(0.010 / 0.70, 12 + more, 0.4, 3), _noisy(0.010, 12 + more, 0.4, 4), floor=0.6)
    assert longer.verdict == "pass", (longer.ci_low, longer.ci_high, more)


def test_whole_ci_above_or_below_the_floor_decides_and_a_ratio_on_the_floor_never_does():
    baseline = _result(0.010)
    assert bench.compare(_result(0.010), baseline, floor=0.6).verdict == "pass"
    assert bench.compare(_result(0.025), baseline, floor=0.6).verdict == "fail"
    on_floor = bench.Comparison(scenario="s", ratio=0.6, ci_low=0.45, ci_high=0.8, floor=0.6, basis="step time",
                                test_median_s=0.0167, baseline_median_s=0.010, memory_ratio=None, steps=12)
    assert on_floor.verdict == "inconclusive"
    assert on_floor.steps_to_decide is None and "no number of steps decides" in on_floor.describe()
    # On the log scale the CI runs from -0.2 to +0.7 around the floor (half-width h = 0.45) and the
    # ratio is d = 0.25 above it: 12 x (0.45 / 0.25)^2 = 38.9, so 39 steps in all, 27 more.
    near = bench.Comparison(scenario="s", ratio=0.6 * 2.718281828 ** 0.25, ci_low=0.6 * 2.718281828 ** -0.2,
                            ci_high=0.6 * 2.718281828 ** 0.7, floor=0.6, basis="step time", test_median_s=0.0,
                            baseline_median_s=0.0, memory_ratio=None, steps=12)
    assert near.steps_to_decide == 27


def test_cli_bench_says_inconclusive_and_exits_1(cli, tmp_path):
    import json

    (tmp_path / "base.json").write_text(json.dumps(_noisy(0.010, 12, 0.4, 1).to_dict()))
    (tmp_path / "test.json").write_text(json.dumps(_noisy(0.010 / 0.70, 12, 0.4, 2).to_dict()))
    done = cli("bench", "--result", tmp_path / "test.json", "--baseline", tmp_path / "base.json", "--floor", "0.6")
    assert done.code == 1
    assert "INCONCLUSIVE" in done.out and "more steps per side would decide" in done.out


@pytest.mark.parametrize(
    ("change", "difference"),
    [
        ({"scenario": "inference"}, "scenario 'inference' vs 's'"),
        ({"params": {"model": "tinylm-large"}}, "model tinylm-large vs tinylm"),
        ({"params": {"model": "tinylm", "shape": "8x512"}}, "shape 8x512 vs (unset)"),
        ({"unit": "run"}, "timed per run vs per step"),
        ({"tokens_per_step": 4096}, "tokens per step 4096 vs 2048"),
    ],
)
def test_compare_refuses_a_baseline_of_another_scenario(change, difference):
    baseline = _result(0.010)
    baseline.params = {"model": "tinylm"}
    baseline.tokens_per_step = 2048
    test = _result(0.010)
    test.params = {"model": "tinylm"}
    test.tokens_per_step = 2048
    for key, value in change.items():
        setattr(test, key, value)
    assert bench.scenario_differences(test, baseline) == [difference]
    with pytest.raises(UserError, match="different scenarios") as caught:
        bench.compare(test, baseline)
    assert difference in str(caught.value)


def test_cli_compares_saved_results_and_rejects_bad_files(cli, tmp_path):
    base, test = tmp_path / "base.json", tmp_path / "test.json"
    base.write_text(json.dumps(_result(0.010).to_dict()))
    test.write_text(json.dumps(_result(0.025).to_dict()))
    failed = cli("bench", "--result", test, "--baseline", base)
    assert failed.code == 1 and "FAIL" in failed.out
    assert cli("bench", "--result", test, "--baseline", base, "--floor", "0.3").code == 0
    data = json.loads(cli("bench", "--result", test, "--baseline", base, "--format", "json").out)
    assert data["comparison"]["ratio"] == pytest.approx(0.4)
    (tmp_path / "junk.json").write_text("{}")
    bad = cli("bench", "--result", tmp_path / "junk.json")
    assert bad.code == 2 and "junk.json" in bad.err
    assert cli("bench").code == 2


def test_cli_refuses_a_baseline_of_another_scenario_unless_allowed(cli, tmp_path):
    base, test = tmp_path / "base.json", tmp_path / "test.json"
    other = _result(0.010)
    other.params = {"batch": "64"}
    base.write_text(json.dumps(_result(0.010).to_dict()))
    test.write_text(json.dumps(other.to_dict()))
    refused = cli("bench", "--result", test, "--baseline", base)
    assert refused.code == 2 and len(refused.err.strip().splitlines()) == 1
    assert "test.json vs baseline" in refused.err and "base.json" in refused.err and "batch 64 vs (unset)" in refused.err
    assert refused.err.rstrip().endswith("to compare throughput anyway (in an accept spec: allow_mismatch = true) (--allow-mismatch)")
    allowed = cli("bench", "--result", test, "--baseline", base, "--allow-mismatch")
    assert allowed.code == 0 and "compared anyway: batch 64 vs (unset)" in allowed.out
    assert cli("bench", "--param", "batch", "--", "true").code == 2


def test_cli_bench_runs_a_marked_script_and_stops_it_when_done(tmp_path):
    script = tmp_path / "loop.py"
    script.write_text(textwrap.dedent("""
        import time
        from accelport.verify.perf import bench
        for i in range(100000):
            time.sleep(0.001)
            if not bench.step(samples=16):
                print("stopped at", i)
                break
    """))
    saved = tmp_path / "r.json"
    done = subprocess.run([sys.executable, "-m", "accelport", "bench", "--warmup", "2", "--min-steps", "5", "--max-steps", "15",
                           "--param", "model=loop", "--save", str(saved), "--", sys.executable, str(script)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    data = json.loads(saved.read_text())
    assert data["unit"] == "step" and 5 <= data["steps"] <= 15
    assert data["params"] == {"model": "loop"}
    assert data["samples_per_step"] == 16
    assert "stopped at" in done.stdout  # step() returned False, the loop ended by itself


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--warmup", "-1"], "--warmup -1: must be 0 <= warmup"),
        (["--min-steps", "0"], "--min-steps 0: must be 1 <= min-steps"),
        (["--max-steps", "0"], "--max-steps 0: must be 1 <= max-steps"),
        (["--budget", "0"], "--budget 0: must be 0 < budget"),
        (["--ci", "0"], "--ci 0: must be 0 < ci < 1"),
        (["--ci", "5"], "--ci 5: must be 0 < ci < 1"),
        (["--samples-per-step", "-8"], "--samples-per-step -8: must be 0 < samples-per-step"),
        (["--tokens-per-step", "0"], "--tokens-per-step 0: must be 0 < tokens-per-step"),
        (["--floor", "0"], "--floor 0: must be 0 < floor"),
        (["--save", "{tmp}/missing/r.json"], "folder {tmp}/missing does not exist"),
        (["--save", "{tmp}"], "is a directory"),
    ],
)
def test_cli_bench_out_of_range_options_are_one_line_usage_errors(cli, tmp_path, arguments, message):
    marker = tmp_path / "ran"
    arguments = [a.format(tmp=tmp_path) for a in arguments]
    done = cli("bench", *arguments, "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')")
    assert done.code == 2, done.out + done.err
    assert message.format(tmp=tmp_path) in done.err and len(done.err.strip().splitlines()) == 1, done.err
    assert not marker.exists()  # refused before the command ran


# --------------------------------------------------------------------------- when measuring stops


def test_stop_rule_converges_on_steady_steps_and_not_on_planted_noise():
    rule = bench.StopRule(warmup=0, min_steps=10, max_steps=200, budget_s=1e9, target_ci=0.05)
    steady = [0.010 * (1 + 0.002 * ((i * 7) % 5 - 2)) for i in range(10)]
    assert rule.reason(steady, elapsed_s=0.0) == "converged"
    # Planted: steps alternate between 5 and 15 ms; the median's CI never gets 5% narrow.
    noisy = [0.005 if i % 2 else 0.015 for i in range(199)]
    assert all(rule.reason(noisy[:n], elapsed_s=0.0) is None for n in range(10, 200))
    assert rule.reason([*noisy, 0.005], elapsed_s=0.0) == "max-steps"


def test_stop_rule_ends_on_the_time_budget_before_convergence_or_max_steps(planted_clock):
    rule = bench.StopRule(warmup=0, min_steps=10, max_steps=1000, budget_s=5.0, target_ci=0.05)
    noisy = [0.005 if i % 2 else 0.015 for i in range(50)]
    assert rule.reason(noisy, elapsed_s=4.9) is None
    assert rule.reason(noisy, elapsed_s=5.0) == "budget"
    # A whole run: steps that never converge (planted noise, 1 and 20 ms in turn) stop on the budget,
    # after the step that takes the planted clock past 0.5 s: 24 pairs (0.504 s), the first a warm-up.
    clock = planted_clock
    count = [0]

    def noisy_step():
        count[0] += 1
        clock.now += 0.001 if count[0] % 2 else 0.02

    result = bench.run(noisy_step, rule=bench.StopRule(warmup=1, min_steps=5, max_steps=100_000, budget_s=0.5, target_ci=0.001),
                       clock=clock)
    assert result.stop_reason == "budget" and not result.converged
    assert count[0] == 48 and len(result.times_s) == 47
    assert result.to_dict()["converged"] is False


def test_cli_notes_a_result_that_did_not_converge(cli, tmp_path):
    unconverged = _result(0.010)
    unconverged.stop_reason = "budget"
    (tmp_path / "r.json").write_text(json.dumps(unconverged.to_dict()))
    done = cli("bench", "--result", tmp_path / "r.json")
    assert done.code == 0 and "stop: budget" in done.out and "the CI did not reach the target width" in done.out
    (tmp_path / "c.json").write_text(json.dumps(_result(0.010).to_dict()))
    converged = cli("bench", "--result", tmp_path / "c.json")
    assert converged.code == 0 and "did not reach" not in converged.out
