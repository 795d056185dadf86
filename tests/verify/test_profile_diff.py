"""profile and profile-diff: real CPU torch.profiler traces, synthetic Kineto and torch_npu traces."""

from __future__ import annotations

import concurrent.futures
import gzip
import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from accelport.errors import UserError
from accelport.verify.perf import breakdown, profile, profile_diff, trace

sys.path.insert(0, str(Path(__file__).parent))
from profile_helpers import MARKED_SCRIPT, MODEL_OPS, OPS, _changed_rows, _diff, _jittered, _moved

try:
    import torch
except ImportError:  # only the capture tests need it; synthetic traces and CLI checks run without
    torch = None

# Capturing real traces needs torch; reading any trace needs the torch extra's numpy and msgspec.
needs_torch = pytest.mark.skipif(torch is None, reason="captures a real trace: needs torch (pip install 'accelport[torch]')")
needs_trace_reader = pytest.mark.skipif(
    importlib.util.find_spec("numpy") is None or importlib.util.find_spec("msgspec") is None,
    reason="the trace reader needs numpy and msgspec (pip install 'accelport[torch]')",
)

HIDDEN = 512  # the planted [1024, 512] x [512, 512] matmul costs 8x fc1 or fc2
_Module = torch.nn.Module if torch is not None else object


class Mlp(_Module):
    def __init__(self, planted: bool) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(64, HIDDEN)
        self.fc2 = torch.nn.Linear(HIDDEN, 64)
        self.planted = planted
        self.w = torch.nn.Parameter(torch.randn(HIDDEN, HIDDEN) / HIDDEN**0.5)

    def forward(self, x):
        h = torch.nn.functional.gelu(self.fc1(x))
        if self.planted:
            h = torch.matmul(h, self.w)  # the extra matmul the diff must find
        return self.fc2(h)


class Net(_Module):
    def __init__(self, planted: bool) -> None:
        super().__init__()
        self.embed = torch.nn.Linear(32, 64)
        self.blocks = torch.nn.ModuleList([Mlp(False), Mlp(planted)])
        self.norm = torch.nn.LayerNorm(64)

    def forward(self, x):
        x = self.embed(x)
        for block in self.blocks:
            x = x + block(x)
        return self.norm(x)


STEPS = 12  # per side; the faster half (6) of each side is kept
BATCH = 1024


def _capture_pair(folder, training: bool, steps: int = STEPS):
    """(base, test) traces of one profiler run whose steps alternate the two models.

    The machine is shared: another job can slow everything down by 2x for a second
    (a busy sibling hyperthread, frequency changes), which no statistic over the steps of
    one side can undo. Alternating base and test steps in one run makes such drift hit
    both sides alike; the run's trace is then split by step parity into two traces
    (even steps: base model, odd steps: the model with the planted matmul).
    """
    torch.manual_seed(0)
    models = [Net(planted=False), Net(planted=True)]
    models[1].load_state_dict(models[0].state_dict())  # the same weights on both sides
    x = torch.randn(BATCH, 32)
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.0) for m in models]
    calls = [0]

    def step():
        model, optimizer = models[calls[0] % 2], optimizers[calls[0] % 2]
        calls[0] += 1
        if training:
            model(x).pow(2).mean().backward()
            optimizer.step()
            optimizer.zero_grad()
        else:
            with torch.no_grad():
                model(x)

    mode = "training" if training else "inference"
    both = profile.capture(step, folder / f"{mode}.json", steps=2 * steps, warmup=2, model=models[0])
    return _split_by_step_parity(both, folder / f"{mode}-base.json", folder / f"{mode}-test.json")


def _split_by_step_parity(path, even_path, odd_path):
    """Write the events of even ProfilerSteps (and the metadata) to one trace, odd ones to another."""
    data = json.loads(path.read_text())
    events = data["traceEvents"]
    windows = sorted((e["ts"], e["ts"] + e["dur"], int(e["name"].split("#")[1]) % 2)
                     for e in events if e.get("ph") == "X" and e.get("name", "").startswith("ProfilerStep#"))
    sides: tuple[list, list] = ([], [])
    for event in events:
        if event.get("ph") == "M" or "ts" not in event:
            sides[0].append(event)
            sides[1].append(event)
            continue
        for begin, end, parity in windows:
            if begin <= event["ts"] < end or (event["ts"] == end and event.get("dur", 0) == 0):
                sides[parity].append(event)
                break
    for side, target in zip(sides, (even_path, odd_path), strict=True):
        target.write_text(json.dumps({**data, "traceEvents": side}))
    return even_path, odd_path


@pytest.fixture(scope="module")
def real_traces(tmp_path_factory):
    """(base, test) traces of inference and of training steps; test has the planted matmul."""
    if torch is None:
        pytest.skip("captures real traces: needs torch")
    # One intra-op thread: on a shared 2-core machine, OpenMP threads waiting for a busy
    # core make op times jump by 10x and drown any planted difference.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        folder = tmp_path_factory.mktemp("traces")
        (folder / "warm").mkdir()
        _capture_pair(folder / "warm", training=True, steps=1)  # first-call costs land here
        return {mode: _capture_pair(folder, mode == "training") for mode in ("inference", "training")}
    finally:
        torch.set_num_threads(threads)


def _explain(result) -> str:
    """The figures to look at when a planted-op assertion fails."""
    rows = "\n".join(f"  {r.module} {r.op}: delta {r.delta:.0f} us, base {r.base and r.base.time:.0f}, "
                     f"test {r.test and r.test.time:.0f}" for r in result.rows[:6])
    return (f"total delta {result.total_delta:.0f} us; step lengths base {[round(t) for t in result.base.step_times]}, "
            f"test {[round(t) for t in result.test.step_times]}; threads {torch.get_num_threads()}\n{rows}")


@needs_torch
def test_planted_matmul_is_the_top_row_with_its_module_and_rows_add_up(real_traces):
    result = profile.diff_traces(*real_traces["inference"])
    top = result.rows[0]
    assert (top.module, top.op) == ("blocks.1", "aten::matmul"), _explain(result)
    assert top.base is None and "new-op" in top.why
    assert f"[{BATCH}, {HIDDEN}]" in top.test.shapes
    assert result.base.steps == result.test.steps == STEPS
    total = result.total_delta
    assert total > 0
    assert abs(sum(r.delta for r in result.rows) - total) <= 0.01 * abs(total)
    # The shown rows (top N plus the summed rest) add up too.
    assert abs(sum(r.delta for r in profile.top_rows(result, 5)) - total) <= 0.01 * abs(total)


@needs_torch
def test_training_step_puts_the_planted_matmul_and_its_backward_on_top_in_its_module(real_traces):
    result = profile.diff_traces(*real_traces["training"])
    # The backward node comes back to the forward op's module through the autograd sequence number.
    rows = {(r.module, r.op): r for r in result.rows}
    planted = [rows[("blocks.1", "aten::matmul")], rows[("blocks.1", "MmBackward0")]]
    assert all(r.base is None and "new-op" in r.why for r in planted)
    assert all(r in result.rows[:3] for r in planted), _explain(result)
    total = result.total_delta
    assert abs(sum(r.delta for r in result.rows) - total) <= 0.01 * abs(total)


@needs_torch
def test_profile_single_trace_rows_cover_the_step(real_traces):
    summary = profile.profile_trace(real_traces["training"][0])
    assert not summary.has_device
    assert sum(s.time for s in summary.rows.values()) == pytest.approx(summary.total, rel=1e-9)
    modules = {key[0] for key in summary.rows}
    assert {"embed", "blocks.0.fc1", "blocks.1.fc2", "norm"} <= modules


def _preempted_steps_trace() -> list[dict]:
    """Four CPU steps; step 2's aten::add was preempted (1000 us instead of 50).

    A second thread's aten::copy_ runs across the edge between steps 0 and 1.
    """
    events = []
    t = 1000.0
    for step, length in enumerate((200.0, 200.0, 1150.0, 200.0)):
        add = 1000.0 if step == 2 else 50.0
        events += [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1, "tid": 1, "ts": t, "dur": length},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t, "dur": 100.0},
            {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": t + 100.0, "dur": add},
        ]
        t += length
    events.append({"ph": "X", "cat": "cpu_op", "name": "aten::copy_", "pid": 1, "tid": 2, "ts": 1150.0, "dur": 100.0})
    return events


@needs_trace_reader
@pytest.mark.parametrize(
    ("steps_used", "kept", "total", "times"),
    [
        # Steps 0 and 1 are the faster half. Step 0: mm 100, add 50, copy_ 50 (alone on the
        # device-less host); step 1: mm and copy_ share [1200, 1250), so mm 75, copy_ 25, add 50, idle 50.
        ("faster-half", 2, 200.0, {"aten::mm": 87.5, "aten::add": 50.0, "aten::copy_": 37.5, profile.IDLE_OP: 25.0}),
        ("all", 4, 437.5, {"aten::mm": 93.75, "aten::add": 287.5, "aten::copy_": 18.75, profile.IDLE_OP: 37.5}),
    ],
)
def test_step_figures_are_averaged_over_the_kept_steps_and_still_add_up(tmp_path, steps_used, kept, total, times):
    path = tmp_path / "steps.json"
    path.write_text(json.dumps({"traceEvents": _preempted_steps_trace()}))
    summary = profile.profile_trace(path, steps_used)
    assert summary.step_times == pytest.approx([200.0, 200.0, 1150.0, 200.0])
    assert (summary.steps, summary.kept_steps, summary.steps_used) == (4, kept, steps_used)
    assert summary.total == pytest.approx(total)
    assert summary.all_steps_total == pytest.approx(437.5)
    assert {key[1]: s.time for key, s in summary.rows.items()} == pytest.approx(times)
    assert sum(s.time for s in summary.rows.values()) == pytest.approx(total, rel=1e-12)
    assert summary.rows[("", "aten::mm")].calls == 1.0
    assert summary.rows[("", "aten::copy_")].calls == pytest.approx(2 / kept * 0.5)


@needs_trace_reader
def test_a_step_holds_the_device_work_launched_in_it_and_not_the_time_between_steps(tmp_path):
    events = []
    for step, (t, kernel_end) in enumerate(((0.0, 150.0), (200.0, 400.0))):
        events += [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1, "tid": 1, "ts": t, "dur": 100.0},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t + 10, "dur": 50.0},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t + 20, "dur": 5.0,
             "args": {"correlation": step}},
            {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": t + 50, "dur": kernel_end - t - 50,
             "args": {"correlation": step}},
        ]
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps({"traceEvents": events}))
    summary = profile.profile_trace(path, "all")
    # Step 0 runs on to the end of its kernel (150), not into the gap before step 1 (200);
    # the last step holds its kernel's tail (400).
    assert summary.step_times == pytest.approx([150.0, 200.0])
    assert summary.total == pytest.approx(175.0)
    mm = summary.rows[("", "aten::mm")]
    # Step 0: host-only [10, 50) + kernel [50, 150); step 1: [210, 250) + [250, 400).
    assert mm.time == pytest.approx((140.0 + 190.0) / 2) and mm.kernels == 1.0
    assert summary.rows[("", profile.IDLE_OP)].time == pytest.approx(10.0)


@needs_trace_reader
def test_a_preempted_base_step_does_not_put_its_op_on_top(tmp_path):
    # The same program on both sides; the base had one step preempted inside aten::add.
    base, test = tmp_path / "base.json", tmp_path / "test.json"
    events = _preempted_steps_trace()
    base.write_text(json.dumps(events))
    clean = [dict(e, dur=50.0) if e["name"] == "aten::add" else e for e in events]
    clean = [dict(e, dur=200.0) if e["name"] == "ProfilerStep#2" else e for e in clean]
    for event in clean:
        if event["name"] == "ProfilerStep#3" or (event["ts"] >= 2550.0 and event["tid"] == 1):
            event["ts"] -= 950.0
    test.write_text(json.dumps(clean))
    robust = profile.diff_traces(base, test)
    assert robust.total_delta == pytest.approx(0.0)
    assert all(r.delta == pytest.approx(0.0) for r in robust.rows)
    naive = profile.diff_traces(base, test, "all")
    assert naive.rows[0].op == "aten::add" and naive.rows[0].delta == pytest.approx(-950.0 / 4)
    with pytest.raises(ValueError, match="same steps"):
        profile.diff(profile.profile_trace(base, "all"), profile.profile_trace(test))


# --------------------------------------------------------------------------- synthetic Kineto pair


def _kineto(fallback: bool) -> dict:
    """A GPU-style Kineto trace of 2 steps: aten::linear and aten::mm in module model.fc.

    With `fallback`, aten::mm runs on the CPU (no launch, no kernel, long host time)
    and copies its input back with aten::copy_ and a device-to-host memcpy.
    """
    events = [
        {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}},
    ]
    corr = 100
    for step in range(2):
        t = 1000.0 + step * 1500.0
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1, "tid": 1, "ts": t,
                       "dur": 1200.0 if fallback else 900.0})
        events.append({"ph": "X", "cat": "user_annotation", "name": "accelport.module: model.fc", "pid": 1, "tid": 1, "ts": t + 10, "dur": 800.0})
        # aten::linear -> aten::addmm -> cudaLaunchKernel -> kernel (both sides)
        events += [
            {"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 1, "tid": 1, "ts": t + 20, "dur": 50.0,
             "args": {"External id": corr, "Sequence number": corr, "Input Dims": [[8, 64], [64, 64], [64]]}},
            {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 1, "tid": 1, "ts": t + 25, "dur": 40.0, "args": {"External id": corr + 1}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t + 30, "dur": 10.0, "args": {"correlation": corr}},
            {"ph": "X", "cat": "kernel", "name": "sm80_xmma_gemm_f32f32", "pid": 0, "tid": 7, "ts": t + 45, "dur": 120.0,
             "args": {"correlation": corr, "External id": corr + 1, "stream": 7, "device": 0}},
            {"ph": "s", "cat": "ac2g", "id": corr, "pid": 1, "tid": 1, "ts": t + 30, "name": "ac2g"},
            {"ph": "f", "cat": "ac2g", "id": corr, "pid": 0, "tid": 7, "ts": t + 45, "name": "ac2g", "bp": "e"},
        ]
        if not fallback:
            events += [
                {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t + 200, "dur": 30.0,
                 "args": {"External id": corr + 2, "Sequence number": corr + 2, "Input Dims": [[8, 64], [64, 64]]}},
                {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t + 205, "dur": 10.0, "args": {"correlation": corr + 1}},
                {"ph": "X", "cat": "kernel", "name": "sm80_xmma_gemm_f32f32", "pid": 0, "tid": 7, "ts": t + 215, "dur": 60.0,
                 "args": {"correlation": corr + 1, "stream": 7, "device": 0}},
            ]
        else:
            events += [
                {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t + 200, "dur": 400.0,
                 "args": {"External id": corr + 2, "Sequence number": corr + 2, "Input Dims": [[8, 64], [64, 64]]}},
                {"ph": "X", "cat": "cpu_op", "name": "aten::copy_", "pid": 1, "tid": 1, "ts": t + 205, "dur": 30.0, "args": {"External id": corr + 3}},
                {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 1, "tid": 1, "ts": t + 210, "dur": 20.0, "args": {"correlation": corr + 1}},
                {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pageable)", "pid": 0, "tid": 7, "ts": t + 215, "dur": 8.0,
                 "args": {"correlation": corr + 1, "stream": 7, "device": 0}},
            ]
        corr += 10
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA A100"}], "traceEvents": events}


@pytest.fixture
def kineto_pair(tmp_path):
    base, test = tmp_path / "base.json", tmp_path / "test.json.gz"
    base.write_text(json.dumps(_kineto(fallback=False), indent=1))
    with gzip.open(test, "wt") as handle:  # torch.profiler's tensorboard handler can gzip
        json.dump(_kineto(fallback=True), handle)
    return base, test


@needs_trace_reader
def test_op_that_ran_on_the_cpu_is_tagged_fallback(kineto_pair):
    result = profile.diff_traces(*kineto_pair)
    rows = {(r.module, r.op): r for r in result.rows}
    mm = rows[("model.fc", "aten::mm")]
    assert "fallback-cpu" in mm.why
    assert mm.base.kernels_per_call == 1 and mm.test.kernels_per_call == 1  # the memcpy is its only device work
    assert "extra-copies" in mm.why
    assert result.rows[0] is mm  # the largest contribution
    linear = rows[("model.fc", "aten::linear")]
    assert "fallback-cpu" not in linear.why
    assert linear.base.device_time == pytest.approx(120.0)
    assert result.base.device == "NVIDIA A100"
    assert sum(r.delta for r in result.rows) == pytest.approx(result.total_delta)


@needs_trace_reader
def test_torch_npu_trace_view_links_ops_to_tasks_through_flows(tmp_path):
    # torch_npu: string timestamps, no correlation args, device tasks on "Ascend Hardware",
    # async_npu flows from the host op to the task.
    events = [
        {"ph": "M", "name": "process_name", "pid": 9, "args": {"name": "Ascend Hardware"}},
        {"ph": "X", "name": "ProfilerStep#0", "pid": 1, "tid": 1, "ts": "100.0", "dur": "500.0"},
        {"ph": "X", "name": "aten::mm", "pid": 1, "tid": 1, "ts": "110.5", "dur": "20.0", "args": {"Input Dims": [[4, 4], [4, 4]]}},
        {"ph": "s", "cat": "async_npu", "name": "torch_to_npu", "id": 7, "pid": 1, "tid": 1, "ts": "112.0"},
        {"ph": "f", "cat": "async_npu", "name": "torch_to_npu", "id": 7, "pid": 9, "tid": 3, "ts": "150.25", "bp": "e"},
        {"ph": "X", "name": "MatMulV2", "pid": 9, "tid": 3, "ts": "150.25", "dur": "300.0", "args": {"Task Type": "AI_CORE"}},
    ]
    path = tmp_path / "trace_view.json"
    path.write_text(json.dumps(events))
    summary = profile.profile_trace(path)
    mm = summary.rows[("", "aten::mm")]
    assert mm.kernels == 1 and mm.device_time == pytest.approx(300.0)
    assert summary.has_device and summary.device == "Ascend Hardware"


@needs_trace_reader
def test_trace_reader_errors_name_the_file(tmp_path):
    truncated = tmp_path / "cut.json"
    truncated.write_text(json.dumps(_kineto(False), indent=1)[:700])
    with pytest.raises(UserError, match=r"cut\.json"):
        trace.load_trace(truncated)
    garbage = tmp_path / "notes.json"
    garbage.write_text("hello")
    with pytest.raises(UserError, match=r"notes\.json: not a Chrome/Kineto trace"):
        trace.load_trace(garbage)
    with pytest.raises(UserError, match=r"missing\.json: trace file not found"):
        trace.load_trace(tmp_path / "missing.json")


@needs_trace_reader
def test_streaming_reader_survives_buffer_edges_and_nested_separators(tmp_path, monkeypatch):
    # Small buffers put event boundaries (and "},{" inside args) at every possible cut.
    monkeypatch.setattr(trace, "_CHUNK", 97)
    data = _kineto(True)
    data["traceEvents"].append({"ph": "X", "cat": "cpu_op", "name": "aten::cat", "pid": 1, "tid": 1, "ts": 1300.0, "dur": 1.0,
                                "args": {"nested": [{"a": 1}, {"b": 2}], "text": "},{"}})
    path = tmp_path / "edge.json"
    path.write_text(json.dumps(data))
    assert list(trace.iter_events(path)) == data["traceEvents"]
    # The column loader reads the same events through the same cuts.
    small = trace.load_trace(path)
    monkeypatch.setattr(trace, "_CHUNK", 1 << 22)
    whole = trace.load_trace(path)
    phases: dict[str, int] = {}
    for event in data["traceEvents"]:
        phases[event["ph"]] = phases.get(event["ph"], 0) + 1
    assert small.counts == whole.counts == phases
    for column in ("kind", "name", "track", "ts", "dur", "corr", "ext", "seq", "dims"):
        assert getattr(small, column).tolist() == getattr(whole, column).tolist(), column
    assert [small.string(i) for i in small.dims.tolist()] == [whole.string(i) for i in whole.dims.tolist()]
    assert "[[8, 64], [64, 64]]" in whole.strings


@needs_trace_reader
def test_trace_loader_reads_odd_but_valid_fields_and_names_the_file_on_bad_ones(tmp_path):
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": "host", "tid": "main", "ts": "10.5", "dur": 2,
         "args": {"External id": "not-an-int", "Input Dims": [[2, 2], [2, 2]]}},
        {"ph": "s", "cat": "async_npu", "id": "a1", "pid": "host", "tid": "main", "ts": 11.0},
        {"ph": "s", "cat": "async_npu", "id": 7, "pid": "host", "tid": "main", "ts": 11.5},
        {"ph": "f", "cat": "async_npu", "id": "a1", "pid": 9, "tid": 3, "ts": 12.0},
    ]
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(events))
    loaded = trace.load_trace(path)
    assert loaded.ts.tolist() == [10.5] and loaded.dur.tolist() == [2.0] and loaded.ext.tolist() == [-1]
    assert loaded.tracks[int(loaded.track[0])] == ("host", "main")
    ids = loaded.flows["id"].tolist()
    assert ids[0] == ids[2] != ids[1] == 7  # a text id is numbered, the same text twice the same way
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"ph": "X", "name": "aten::mm", "ts": 1, "dur": 1, "args": [1, 2]}]))
    with pytest.raises(UserError, match=r"bad\.json: trace event with an unexpected field"):
        trace.load_trace(bad)
    bad.write_text(json.dumps([{"ph": "X", "name": "aten::mm", "ts": "soon", "dur": 1}]))
    with pytest.raises(UserError, match=r"bad\.json: trace event with an unexpected field"):
        trace.load_trace(bad)


@needs_torch
def test_large_traces_are_read_in_parallel_with_the_same_result(real_traces, monkeypatch):
    one_by_one = profile.diff_traces(*real_traces["training"])
    monkeypatch.setattr(breakdown, "PARALLEL_BYTES", 0)
    started = []

    class CountingExecutor(concurrent.futures.ProcessPoolExecutor):
        def __init__(self, *args, **kwargs):
            started.append(kwargs.get("max_workers"))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr("concurrent.futures.ProcessPoolExecutor", CountingExecutor)
    both = profile.diff_traces(*real_traces["training"])
    assert started == [1]
    assert both.to_dict() == one_by_one.to_dict()


@needs_trace_reader
def test_cli_profile_diff_formats_and_exit_codes(cli, kineto_pair, tmp_path):
    done = cli("profile-diff", *kineto_pair, "--format", "json")
    assert done.code == 0, done.err
    data = json.loads(done.out)
    assert data["rows"][0]["op"] == "aten::mm"
    assert data["rows_delta_sum_us"] == pytest.approx(data["total_delta_us"])
    assert data["base"]["steps_used"] == "faster-half" and data["base"]["kept_steps"] == 1
    every = json.loads(cli("profile-diff", *kineto_pair, "--format", "json", "--steps-used", "all").out)
    assert every["base"]["steps_used"] == "all" and every["base"]["kept_steps"] == 2
    assert every["test"]["step_times_us"] == pytest.approx([1200.0, 1200.0])  # the 300 us between steps is in neither
    assert cli("profile-diff", *kineto_pair, "--steps-used", "median").code == 2
    html = tmp_path / "diff.html"
    assert cli("profile-diff", *kineto_pair, "--format", "html", "-o", html).code == 0
    assert 'class="waterfall"' in html.read_text()
    table = cli("profile-diff", *kineto_pair)
    assert "fallback-cpu" in table.out
    assert cli("profile-diff", *kineto_pair, "--fail-above", "1.1").code == 1
    missing = cli("profile-diff", tmp_path / "nope.json", kineto_pair[1])
    assert missing.code == 2 and "nope.json" in missing.err


@pytest.mark.parametrize(
    ("arguments", "message"),
    [(["--top", "-1"], "--top -1: must be 0 <= top"), (["--fail-above", "0"], "--fail-above 0: must be 0 < fail-above")],
)
def test_cli_profile_diff_out_of_range_options_are_usage_errors(cli, kineto_pair, arguments, message):
    done = cli("profile-diff", *kineto_pair, *arguments)
    assert done.code == 2 and message in done.err and len(done.err.strip().splitlines()) == 1, done.err


@needs_torch
def test_cli_profile_runs_a_script_and_profiles_its_marked_steps(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(MARKED_SCRIPT))
    out = tmp_path / "t.json"
    done = subprocess.run([sys.executable, "-m", "accelport", "profile", "--steps", "2", "--warmup", "1", "--trace", str(out),
                           "--", sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = profile.profile_trace(out)
    assert summary.steps == 2 and summary.step_source == "ProfilerStep"
    assert {"0", "2"} <= {key[0] for key in summary.rows}  # module paths of the Sequential's layers
    assert "aten::linear" in done.stdout


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["nope.py"], "nope.py: script not found"),
        (["--", "python", "nope.py"], "nope.py: script not found"),
        (["--", "{folder}"], "is a folder, not a script"),
        (["--", "/nonexistent/python3", "{script}"], "/nonexistent/python3: cannot start"),
        (["--trace", "/nonexistent/dir/t.json", "--", "{script}"], "--trace /nonexistent/dir/t.json: folder"),
        (["--steps", "0", "--", "{script}"], "--steps 0: must be 1 <= steps"),
        (["--warmup", "-1", "--", "{script}"], "--warmup -1"),
    ],
)
def test_cli_profile_bad_arguments_are_one_line_usage_errors(cli, tmp_path, monkeypatch, arguments, message):
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "train.py"
    script.write_text("raise SystemExit('the script must not run on bad arguments')\n")
    (tmp_path / "pkg.py").mkdir()
    done = cli("profile", *[a.format(script=script, folder=tmp_path / "pkg.py") for a in arguments])
    assert done.code == 2, done.out + done.err
    assert message in done.err and "Traceback" not in done.err, done.err
    assert len(done.err.strip().splitlines()) == 1
    assert not (tmp_path / "accelport-trace.json").exists()


def test_profile_child_without_torch_says_so_in_one_line(tmp_path):
    # The interpreter after `--` may lack torch: one line naming it, not an ImportError traceback.
    code = ("import sys; sys.modules['torch'] = None\n"
            "from accelport.verify.perf.profile import _child\n"
            f"sys.exit(_child(['--trace', {str(tmp_path / 't.json')!r}, {str(tmp_path / 'x.py')!r}]))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "has no torch" in done.stderr and "Traceback" not in done.stderr


# --------------------------------------------------------------------------- why tags on synthetic GPU traces


def _gpu_trace(ops: list[dict], steps: int = 2, step_len: float = 1000.0) -> dict:
    """A Kineto trace of `steps` identical steps; each op (module model.fc) launches its kernels.

    An op is {"name", "at", "dur", "kernels": [(kernel name, at, dur, stream)]}, times in
    microseconds from the step's start; every kernel gets a launch inside its op and a correlation id.
    """
    events = [
        {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}},
    ]
    corr = 1
    for step in range(steps):
        t = 1000.0 + step * (step_len + 500.0)
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1, "tid": 1, "ts": t, "dur": step_len})
        events.append({"ph": "X", "cat": "user_annotation", "name": "accelport.module: model.fc", "pid": 1, "tid": 1,
                       "ts": t + 1, "dur": step_len - 2})
        for op in ops:
            events.append({"ph": "X", "cat": "cpu_op", "name": op["name"], "pid": 1, "tid": 1, "ts": t + op["at"], "dur": op["dur"],
                           "args": {"External id": corr, "Input Dims": [[8, 64]]}})
            for k, (kernel, at, dur, stream) in enumerate(op.get("kernels", ())):
                launch_at = t + op["at"] + min(1.0 + k, op["dur"] - 1.0)
                events += [
                    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": launch_at, "dur": 0.5,
                     "args": {"correlation": corr}},
                    {"ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": stream, "ts": t + at, "dur": dur,
                     "args": {"correlation": corr, "stream": stream, "device": 0}},
                ]
                corr += 1
            corr += 1
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA A100"}], "traceEvents": events}


def _tags(tmp_path, base_ops: list[dict], test_ops: list[dict], op: str) -> tuple[str, ...]:
    base, test = tmp_path / "base.json", tmp_path / "test.json"
    base.write_text(json.dumps(_gpu_trace(base_ops)))
    test.write_text(json.dumps(_gpu_trace(test_ops)))
    result = profile.diff_traces(base, test)
    assert abs(sum(r.delta for r in result.rows) - result.total_delta) <= 1e-6 * max(1.0, abs(result.total_delta))
    return next(r for r in result.rows if (r.module, r.op) == ("model.fc", op)).why


def _mm(at: float = 600.0) -> dict:
    # An unchanged neighbour, so the step holds more than the op under test.
    return {"name": "aten::mm", "at": at, "dur": 20.0, "kernels": [("sm80_gemm", at + 10, 100.0, 7)]}


@needs_trace_reader
def test_more_kernels_per_call_is_tagged_and_one_longer_kernel_is_not(tmp_path):
    base = [{"name": "aten::softmax", "at": 10.0, "dur": 20.0, "kernels": [("softmax_fused", 30.0, 100.0, 7)]}, _mm()]
    # The test side splits the op into three kernels: 3 per call instead of 1.
    split = [{"name": "aten::softmax", "at": 10.0, "dur": 20.0,
              "kernels": [("reduce_max", 30.0, 40.0, 7), ("exp_sub", 75.0, 40.0, 7), ("reduce_sum", 120.0, 40.0, 7)]}, _mm()]
    assert "more-kernels" in _tags(tmp_path, base, split, "aten::softmax")
    # Near miss: as slow, but still one kernel per call.
    longer = [{"name": "aten::softmax", "at": 10.0, "dur": 20.0, "kernels": [("softmax_fused", 30.0, 160.0, 7)]}, _mm()]
    tags = _tags(tmp_path, base, longer, "aten::softmax")
    assert "more-kernels" not in tags and "slower-kernels" in tags


@needs_trace_reader
def test_host_bound_op_is_tagged_and_a_device_bound_slowdown_is_not(tmp_path):
    base = [{"name": "aten::index", "at": 10.0, "dur": 20.0, "kernels": [("index_kernel", 35.0, 100.0, 7)]}, _mm()]
    # The test side spends 300 us on the host before its (short) kernel: the device waits.
    host = [{"name": "aten::index", "at": 10.0, "dur": 300.0, "kernels": [("index_kernel", 312.0, 30.0, 7)]}, _mm()]
    tags = _tags(tmp_path, base, host, "aten::index")
    assert "host-bound" in tags
    # Near miss: the host part grows too (20 -> 80 us), but most of the slowdown is on the device.
    device = [{"name": "aten::index", "at": 10.0, "dur": 80.0, "kernels": [("index_kernel", 92.0, 300.0, 7)]}, _mm(at=650.0)]
    tags = _tags(tmp_path, base, device, "aten::index")
    assert "host-bound" not in tags and "slower-kernels" in tags


@needs_trace_reader
def test_unoverlapped_communication_is_tagged_and_overlapped_is_not(tmp_path):
    compute = {"name": "aten::mm", "at": 10.0, "dur": 20.0, "kernels": [("sm80_gemm", 30.0, 200.0, 7)]}
    # Base: the all-reduce runs on its own stream under the GEMM.
    overlapped = {"name": "c10d::allreduce_", "at": 40.0, "dur": 10.0,
                  "kernels": [("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 50.0, 150.0, 20)]}
    # Test: the same all-reduce waits for the GEMM to finish, so nothing hides it.
    exposed = {"name": "c10d::allreduce_", "at": 40.0, "dur": 10.0,
               "kernels": [("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 240.0, 150.0, 20)]}
    assert "exposed-comm" in _tags(tmp_path, [compute, overlapped], [compute, exposed], "c10d::allreduce_")
    # Near miss: overlapped on both sides (a few us later), no tag.
    later = {"name": "c10d::allreduce_", "at": 40.0, "dur": 10.0,
             "kernels": [("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 55.0, 150.0, 20)]}
    assert "exposed-comm" not in _tags(tmp_path, [compute, overlapped], [compute, later], "c10d::allreduce_")


# --------------------------------------------------------------------------- significance


@needs_trace_reader
def test_an_identical_pair_shows_no_significant_row(tmp_path):
    import random

    rng = random.Random(11)
    result = _diff(tmp_path, _jittered(rng, MODEL_OPS, 12), _jittered(rng, MODEL_OPS, 12))
    assert _changed_rows(result) == []
    assert {r.significance for r in result.rows} == {profile.NOISE}
    assert result.shift == pytest.approx(1.0, abs=0.05)


@needs_trace_reader
def test_a_machine_wide_slowdown_of_every_op_is_a_capture_wide_shift_not_a_row(tmp_path):
    import random

    rng = random.Random(12)
    # The test capture ran while the machine was busier: every op 1.8x slower, and not all
    # alike (between 1.6x and 2.0x, as ops sharing a core with another job do).
    moves = {name: 1.6 + 0.4 * i / (len(MODEL_OPS) - 1) for i, name in enumerate(MODEL_OPS)}
    result = _diff(tmp_path, _jittered(rng, MODEL_OPS, 12), _moved(rng, MODEL_OPS, 12, moves))
    assert result.ratio > 1.6
    assert _changed_rows(result) == []
    assert result.shift == pytest.approx(1.8, rel=0.1)
    assert f"the median row took {result.shift:.2f}x, capture-wide" in profile.significance_line(result)


@needs_trace_reader
def test_one_op_slowed_between_captures_is_significant_and_ranked_first(tmp_path):
    import random

    rng = random.Random(13)
    # On top of a capture-wide 1.3x, gelu took 2x more: it stands out of how the others moved.
    moves = {name: 1.3 for name in MODEL_OPS} | {"aten::gelu": 2.6}
    result = _diff(tmp_path, _jittered(rng, MODEL_OPS, 12), _moved(rng, MODEL_OPS, 12, moves))
    assert _changed_rows(result) == ["aten::gelu"]
    assert result.rows[0].op == "aten::gelu"
    assert result.rows[0].p_value < profile.FAMILY_ALPHA / len(MODEL_OPS)


@needs_trace_reader
def test_a_row_preempted_in_most_steps_of_one_capture_is_not_significant(tmp_path):
    import random

    rng = random.Random(14)
    test = _jittered(rng, MODEL_OPS, 12)
    for step in (0, 1, 2, 4, 5, 6, 8, 9, 11):  # another process took the core inside linear in 9 of 12 steps
        test[step]["aten::linear"] += 5000.0
    result = _diff(tmp_path, _jittered(rng, MODEL_OPS, 12), test)
    assert _changed_rows(result) == []


@needs_trace_reader
def test_one_op_that_moved_far_while_the_others_moved_too_is_within_their_spread(tmp_path):
    import random

    rng = random.Random(15)
    # Seen on a shared 2-core CPU between two captures of the same program: gelu 3.6x, the
    # linears 2x, the rest not at all. The rows' changes spread widely; none stands out of it.
    moves = {"aten::gelu": 3.6, "aten::linear": 2.0, "aten::addmm": 2.0, "aten::softmax": 1.5}
    result = _diff(tmp_path, _moved(rng, MODEL_OPS, 12, moves), _jittered(rng, MODEL_OPS, 12))
    assert _changed_rows(result) == []


@needs_trace_reader
def test_too_few_rows_leave_significance_unknown_and_say_so(tmp_path):
    import random

    rng = random.Random(16)
    ops = {"aten::linear": 400.0, "aten::gelu": 150.0}
    result = _diff(tmp_path, _jittered(rng, ops, 12), _jittered(rng, dict(ops, **{"aten::gelu": 600.0}), 12))
    assert {r.significance for r in result.rows} == {profile.UNKNOWN}
    assert f"needs {profile.MIN_ROWS}" in profile.significance_line(result)


def test_t_two_sided_p_matches_the_tables():
    # Two-sided critical values from any table of Student's t.
    for t, df, p in [(12.706, 1, 0.05), (9.925, 2, 0.01), (3.182, 3, 0.05), (5.041, 8, 0.001), (4.587, 10, 0.001)]:
        assert profile_diff._t_two_sided_p(t, df) == pytest.approx(p, rel=0.01)
    assert profile_diff._t_two_sided_p(0.0, 5) == 1.0


@needs_trace_reader
def test_an_identical_program_on_a_busier_machine_shows_no_significant_row(tmp_path):
    import random

    rng = random.Random(1)
    # The test side ran while another job took half the core: every op 1.6x slower, each step jittered.
    result = _diff(tmp_path, _jittered(rng, OPS, 12), _jittered(rng, OPS, 12, scale=1.6))
    assert result.ratio > 1.5  # the slowdown is real in the figures...
    assert [r.op for r in result.rows if r.significance in (profile.SIGNIFICANT, profile.STRUCTURAL)] == []
    assert {r.significance for r in result.rows if r.op in OPS} == {profile.NOISE}  # ...but no op explains it
    assert "0 structural" in profile.significance_line(result)


@needs_trace_reader
def test_one_op_slower_in_every_step_is_significant_and_the_others_are_not(tmp_path):
    import random

    rng = random.Random(2)
    slower = dict(MODEL_OPS, **{"aten::gelu": MODEL_OPS["aten::gelu"] * 2.5})
    result = _diff(tmp_path, _jittered(rng, MODEL_OPS, 12), _jittered(rng, slower, 12))
    rows = {r.op: r for r in result.rows}
    assert rows["aten::gelu"].significance == profile.SIGNIFICANT
    assert rows["aten::gelu"].p_value < profile.FAMILY_ALPHA / len(MODEL_OPS)
    assert result.rows[0].op == "aten::gelu"
    # Their shares of the step shrank, but their times did not change: not significant.
    assert {rows[op].significance for op in MODEL_OPS if op != "aten::gelu"} == {profile.NOISE}
    assert "significant (p=" in profile.render_text(result)


@needs_trace_reader
def test_a_small_new_op_ranks_above_an_existing_op_that_drifted_between_captures(tmp_path):
    import random

    rng = random.Random(3)
    base = _jittered(rng, OPS, 12, jitter=0.02)
    # The planted op costs 20 us (3% of a step); linear came out 8% (32 us) slower in every step
    # of the later capture: a warmer or busier machine, not a change of the program.
    drifted = dict(OPS, **{"aten::linear": OPS["aten::linear"] * 1.08, "aten::matmul": 20.0})
    result = _diff(tmp_path, base, _jittered(rng, drifted, 12, jitter=0.02))
    assert result.rows[0].op == "aten::matmul" and result.rows[0].significance == profile.STRUCTURAL
    assert "new-op" in result.rows[0].why
    by_delta = sorted(result.rows, key=lambda r: -r.delta)
    assert by_delta[0].op == "aten::linear"  # ranked by delta alone, the drift would come first
    assert {r.op: r for r in result.rows}["aten::linear"].significance == profile.NOISE  # below RELATIVE_NOISE


@needs_trace_reader
def test_too_few_steps_leave_significance_unknown_and_say_how_many_are_needed(tmp_path):
    import random

    rng = random.Random(4)
    result = _diff(tmp_path, _jittered(rng, OPS, 2), _jittered(rng, OPS, 2, scale=1.3))
    assert {r.significance for r in result.rows if r.op in OPS} == {profile.UNKNOWN}
    line = profile.significance_line(result)
    assert f"needs {profile.MIN_STEPS}" in line and "profile 8 or more steps" in line
    assert "--" not in line  # library text names no command-line flag


@needs_trace_reader
def test_a_new_op_ranks_first_even_when_noise_made_the_test_side_faster(tmp_path):
    import random

    rng = random.Random(5)
    # Noise made the test capture 20% faster overall; it also has a cheap new slice and a costlier new matmul.
    planted = dict(OPS, **{"aten::slice": 2.0, "aten::matmul": 30.0})
    result = _diff(tmp_path, _jittered(rng, OPS, 12), _jittered(rng, planted, 12, scale=0.8))
    assert result.total_delta < 0
    assert [r.op for r in result.rows[:2]] == ["aten::matmul", "aten::slice"]


@needs_trace_reader
def test_new_ops_rank_by_their_cost_in_the_fastest_step_not_by_preempted_steps(tmp_path):
    import random

    rng = random.Random(6)
    planted = dict(OPS, **{"aten::slice": 2.0, "aten::matmul": 30.0})
    test = _jittered(rng, planted, 12, jitter=0.01)
    for step in range(10):  # the cheap slice was preempted in most steps, the fast half included
        test[step]["aten::slice"] += 200.0
    result = _diff(tmp_path, _jittered(rng, OPS, 12, jitter=0.01), test)
    rows = {r.op: r for r in result.rows}
    assert rows["aten::slice"].delta > rows["aten::matmul"].delta  # averaged, the slice looks costlier
    assert [r.op for r in result.rows[:2]] == ["aten::matmul", "aten::slice"]
