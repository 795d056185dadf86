"""Synthetic host-only traces for the significance tests of profile-diff: steps of ops with known times."""

from __future__ import annotations

import json

from accelport.verify.perf import profile

# A training loop that marks its steps: `accelport profile --steps N` must stop it after them.
MARKED_SCRIPT = """
    import torch
    from accelport.verify.perf import bench
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    x = torch.randn(8, 16)
    for i in range(1000):
        model(x).sum().backward()
        bench.step()
    raise SystemExit("the profiler should have stopped the run after its steps")
"""


def _cpu_steps(steps: list[dict[str, float]]) -> list[dict]:
    """A host-only trace: each step runs its ops one after the other, for the given microseconds."""
    events = []
    t = 1000.0
    for number, ops in enumerate(steps):
        length = sum(ops.values())
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{number}", "pid": 1, "tid": 1,
                       "ts": t, "dur": length})
        at = t
        for name, dur in ops.items():
            events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": at, "dur": dur})
            at += dur
        t += length + 50.0
    return events


def _jittered(rng, ops: dict[str, float], steps: int, scale: float = 1.0, jitter: float = 0.08) -> list[dict[str, float]]:
    return [{name: dur * scale * (1 + rng.uniform(-jitter, jitter)) for name, dur in ops.items()} for _ in range(steps)]


OPS = {"aten::linear": 400.0, "aten::gelu": 150.0, "aten::layer_norm": 120.0, "aten::add": 60.0}


def _diff(tmp_path, base_steps, test_steps, steps_used="faster-half"):
    base, test = tmp_path / "base.json", tmp_path / "test.json"
    base.write_text(json.dumps({"traceEvents": _cpu_steps(base_steps)}))
    test.write_text(json.dumps({"traceEvents": _cpu_steps(test_steps)}))
    return profile.diff_traces(base, test, steps_used)


def _diff_captures(tmp_path, base_captures, test_captures):
    """profile-diff of two sides, each a list of captures (each a list of steps)."""
    sides = []
    for side, captures in (("base", base_captures), ("test", test_captures)):
        paths = []
        for number, steps in enumerate(captures):
            path = tmp_path / f"{side}-{number}.json"
            path.write_text(json.dumps({"traceEvents": _cpu_steps(steps)}))
            paths.append(path)
        sides.append(paths)
    return profile.diff_traces(*sides)


# The rows of the benchmark's model (two MLP blocks between an embedding and a norm): a
# row's change is judged against the other rows' changes, so a realistic diff has many.
MODEL_OPS = {
    "aten::embedding": 90.0, "aten::linear": 800.0, "aten::gelu": 340.0, "aten::addmm": 850.0,
    "aten::add": 60.0, "aten::mul": 120.0, "aten::sum": 70.0, "aten::layer_norm": 90.0, "aten::softmax": 200.0,
}


def _changed_rows(result) -> list[str]:
    return [r.op for r in result.rows if r.significance in (profile.SIGNIFICANT, profile.STRUCTURAL)]


def _moved(rng, ops: dict[str, float], steps: int, moves: dict[str, float], jitter: float = 0.08) -> list[dict[str, float]]:
    """Steps of a capture in which each op's time moved by its factor in `moves` (default 1)."""
    return _jittered(rng, {name: dur * moves.get(name, 1.0) for name, dur in ops.items()}, steps, jitter=jitter)
