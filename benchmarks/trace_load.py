"""Load and diff two 2.75M-event Kineto traces: wall time and peak RSS (target: under 30 s and 1 GB).

Generates two GPU-style Kineto traces in the layout torch.profiler writes
(pretty-printed events: CPU ops with nested ops, cudaLaunchKernel with a
correlation id, kernels, ac2g flow pairs, ProfilerStep ranges and module
annotations). The test side has its GEMM kernels 1.5x slower, the change the
acceptance-tools note used for msprof-analyze. Each measured phase runs in a
fresh process so its peak RSS is its own.

The targets are judged on what the issue asks: load *and diff* the pair, as
`accelport profile-diff` does it (`profile.diff_traces`: the two traces are
read at the same time in two processes on a multi-core machine). Its peak RSS
is the sum of the peaks of the two processes, which bounds what they held at
once. Also reported: one trace loaded alone, and the pair read one after the
other in one process (what a single core gives).

    .venv/bin/python benchmarks/trace_load.py [--events 2750000] [--keep DIR]

Prints one JSON object. When holistictraceanalysis is installed it also times
HTA's TraceAnalysis load of the same file (the comparison figure); otherwise
the comparison is the figure measured in the acceptance-tools note
(HTA 0.5.0: 254 s and 3.3 GB for 2,746,276 events on the same kind of machine).
The machine's load average is printed too: on a shared machine the times move with it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

EVENTS_PER_OP = 7  # outer op, inner op, aten::empty, launch, kernel, flow start, flow end
HTA_NOTE = {"events": 2_746_276, "load_s": 254.0, "peak_rss_mb": 3300.0, "source": "shared/notes/acceptance_tools.md, HTA 0.5.0"}

_OPS = (
    # (module, outer op, inner op, kernel, base kernel us)
    ("blocks.{b}.attn", "aten::linear", "aten::addmm", "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", 42.0),
    ("blocks.{b}.attn", "aten::softmax", "aten::_softmax", "void at::native::softmax_warp_forward<float>", 11.0),
    ("blocks.{b}.mlp", "aten::linear", "aten::addmm", "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize256x128x64", 55.0),
    ("blocks.{b}.mlp", "aten::gelu", "aten::gelu", "void at::native::vectorized_elementwise_kernel<4, GeluCUDAKernelImpl>", 9.0),
    ("blocks.{b}.norm", "aten::layer_norm", "aten::native_layer_norm", "void at::native::vectorized_layer_norm_kernel<float>", 7.0),
    ("blocks.{b}", "aten::add", "aten::add", "void at::native::vectorized_elementwise_kernel<4, CUDAFunctor_add<float>>", 5.0),
)


def _event(ph: str, cat: str, name: str, pid: object, tid: object, ts: float, dur: float | None, args: str) -> str:
    head = f'  {{\n    "ph": "{ph}", "cat": "{cat}", "name": "{name}", "pid": {pid}, "tid": {tid},\n    "ts": {ts:.3f}'
    if dur is not None:
        head += f', "dur": {dur:.3f}'
    return head + (f',\n    "args": {{\n      {args}\n    }}\n  }}' if args else "\n  }")


def generate(path: Path, events: int, gemm_scale: float = 1.0) -> int:
    """Write a Kineto-layout trace of about `events` events; returns the exact count."""
    pid, tid, stream = 4242, 4242, 7
    ops_per_step = len(_OPS) * 4  # four blocks
    per_step = ops_per_step * EVENTS_PER_OP + 4 + 1  # ops, module annotations, the step
    steps = max(1, -(-(events - 2) // per_step))
    written = 0
    host_t = 1_000_000.0
    device_t = host_t
    corr = 1
    ext = 1
    with path.open("w", encoding="utf-8") as out:
        out.write('{\n  "schemaVersion": 1,\n  "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85045870592}],\n')
        out.write('  "displayTimeUnit": "ms",\n  "traceEvents": [\n')
        out.write('  {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "python"}},\n')
        out.write('  {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}}')
        for step in range(steps):
            parts = []
            step_start = host_t
            for block in range(4):
                module_start = host_t
                module_parts = []
                for _module, outer, inner, kernel, kernel_us in _OPS:
                    scale = gemm_scale if "gemm" in kernel else 1.0
                    launch_at = host_t + 6.0
                    device_t = max(device_t, launch_at + 4.0)
                    k_dur = kernel_us * scale
                    module_parts.append(_event("X", "cpu_op", outer, pid, tid, host_t, 14.0, f'"External id": {ext}, "Sequence number": {ext}, "Fwd thread id": 0, "Input Dims": [[8, 512, 1024], [1024, 1024]]'))
                    module_parts.append(_event("X", "cpu_op", inner, pid, tid, host_t + 1.0, 11.0, f'"External id": {ext + 1}, "Input Dims": [[8, 512, 1024], [1024, 1024]]'))
                    module_parts.append(_event("X", "cpu_op", "aten::empty", pid, tid, host_t + 2.0, 1.5, f'"External id": {ext + 2}'))
                    module_parts.append(_event("X", "cuda_runtime", "cudaLaunchKernel", pid, tid, launch_at, 4.0, f'"External id": {ext + 1}, "cbid": 211, "correlation": {corr}'))
                    module_parts.append(_event("X", "kernel", kernel, 0, stream, device_t, k_dur, f'"External id": {ext + 1}, "queued": 0, "device": 0, "stream": {stream}, "correlation": {corr}, "grid": [128, 1, 1], "block": [256, 1, 1]'))
                    module_parts.append(f'  {{\n    "ph": "s", "id": {corr}, "pid": {pid}, "tid": {tid}, "ts": {launch_at:.3f},\n    "cat": "ac2g", "name": "ac2g"\n  }}')
                    module_parts.append(f'  {{\n    "ph": "f", "id": {corr}, "pid": 0, "tid": {stream}, "ts": {device_t:.3f},\n    "cat": "ac2g", "name": "ac2g", "bp": "e"\n  }}')
                    device_t += k_dur + 1.0
                    host_t += 16.0
                    corr += 1
                    ext += 3
                    written += EVENTS_PER_OP
                name = _OPS[0][0].format(b=block).rsplit(".", 1)[0]
                parts.append(_event("X", "user_annotation", f"accelport.module: {name}", pid, tid, module_start, host_t - module_start - 0.5, f'"External id": {ext}'))
                ext += 1
                written += 1
                parts.extend(module_parts)
            host_t = max(host_t, device_t) + 5.0
            parts.insert(0, _event("X", "user_annotation", f"ProfilerStep#{step}", pid, tid, step_start, host_t - step_start - 1.0, f'"External id": {ext}'))
            ext += 1
            written += 1
            out.write(",\n" + ",\n".join(parts))
        out.write('\n  ],\n  "traceName": "synthetic"\n}\n')
    return written + 2


def _peak_rss_mb(who: int = resource.RUSAGE_SELF) -> float:
    return resource.getrusage(who).ru_maxrss / 1024.0


def _phase(argv: list[str]) -> dict:
    """Run one measured phase in a fresh interpreter; returns its JSON line."""
    done = subprocess.run([sys.executable, __file__, *argv], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"phase {argv} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _measure_load(path: str) -> None:
    from accelport.verify.perf.profile import summarize
    from accelport.verify.perf.trace import load_trace

    started = time.perf_counter()
    trace = load_trace(path)
    loaded = time.perf_counter() - started
    summarize(trace)
    elapsed = time.perf_counter() - started
    print(json.dumps({"load_s": round(loaded, 2), "load_and_summarize_s": round(elapsed, 2), "events": trace.event_count,
                      "peak_rss_mb": round(_peak_rss_mb(), 1)}))


def _measure_diff(base: str, test: str, parallel: bool) -> None:
    from accelport.verify.perf import breakdown, profile

    if not parallel:
        breakdown.PARALLEL_BYTES = 1 << 62  # read by profile_traces, which lives in breakdown
    started = time.perf_counter()
    result = profile.diff_traces(base, test)
    elapsed = time.perf_counter() - started
    top = result.rows[0]
    # The worker has exited: RUSAGE_CHILDREN holds its peak. Both ran at once, so the sum bounds their joint peak.
    own, worker = _peak_rss_mb(), _peak_rss_mb(resource.RUSAGE_CHILDREN)
    print(
        json.dumps(
            {
                "load_and_diff_s": round(elapsed, 2),
                "peak_rss_mb": round(own + worker, 1),
                "peak_rss_mb_by_process": {"main": round(own, 1), "worker": round(worker, 1)},
                "processes": 2 if worker else 1,
                "rows": len(result.rows),
                "total_delta_us_per_step": round(result.total_delta, 3),
                "rows_sum_us_per_step": round(sum(r.delta for r in result.rows), 3),
                "top_row": {"module": top.module, "op": top.op, "delta_us": round(top.delta, 3), "why": list(top.why)},
            }
        )
    )


def _measure_hta(folder: str) -> None:
    from hta.trace_analysis import TraceAnalysis

    started = time.perf_counter()
    TraceAnalysis(trace_dir=folder)
    print(json.dumps({"hta_load_s": round(time.perf_counter() - started, 2), "hta_peak_rss_mb": round(_peak_rss_mb(), 1)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=2_750_000)
    parser.add_argument("--keep", metavar="DIR", help="write the traces here and keep them")
    parser.add_argument("--phase", choices=("load", "diff", "diff-one-process", "hta"), help=argparse.SUPPRESS)
    parser.add_argument("paths", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase == "load":
        return _measure_load(args.paths[0])
    if args.phase in ("diff", "diff-one-process"):
        return _measure_diff(args.paths[0], args.paths[1], parallel=args.phase == "diff")
    if args.phase == "hta":
        return _measure_hta(args.paths[0])

    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="accelport-trace-load-"))
    folder.mkdir(parents=True, exist_ok=True)
    try:
        base, test = folder / "base" / "rank0.pt.trace.json", folder / "test" / "rank0.pt.trace.json"
        base.parent.mkdir(exist_ok=True)
        test.parent.mkdir(exist_ok=True)
        started = time.perf_counter()
        events = generate(base, args.events)
        generate(test, args.events, gemm_scale=1.5)
        generate_s = time.perf_counter() - started
        os.sync()  # the kernel writing back 1 GB of fresh trace would otherwise slow whichever phase runs first
        load_average = [round(x, 2) for x in os.getloadavg()]
        diff = _phase(["--phase", "diff", str(base), str(test)])
        load = _phase(["--phase", "load", str(base)])
        sequential = _phase(["--phase", "diff-one-process", str(base), str(test)])
        figures = {
            "benchmark": "trace_load",
            "events_per_trace": events,
            "file_mb": round(base.stat().st_size / 1e6, 1),
            "generate_s": round(generate_s, 1),
            "load_and_diff_two_traces": diff,
            "targets": {"load_and_diff_s": 30, "peak_rss_mb": 1000},
            "meets_targets": diff["load_and_diff_s"] < 30 and diff["peak_rss_mb"] < 1000,
            "load_one_trace": load,
            "load_and_diff_two_traces_in_one_process": sequential,
            "cpu_count": os.cpu_count(),
            "load_average_1_5_15_min": {"before": load_average, "after": [round(x, 2) for x in os.getloadavg()]},
        }
        if importlib.util.find_spec("hta") is not None:
            figures["comparison"] = {"tool": "holistictraceanalysis", **_phase(["--phase", "hta", str(base.parent)])}
        else:
            figures["comparison"] = {"tool": "holistictraceanalysis (not installed; figure from the note)", **HTA_NOTE}
        print(json.dumps(figures, indent=2))
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
