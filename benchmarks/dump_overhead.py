"""Training-step time of a small transformer on the CPU: plain, statistics dump, full-tensor dump, in one run.

The model is the example's TinyLM (examples/legacy_cuda_app/model.py) at larger sizes
(d_model 256 and 512, 4 layers, 4 heads, sequence 128, batch 8 by default), trained with AdamW
in train mode (dropout on). Three copies of it take one step each in turn (plain, under a
statistics capture, under a full-tensor capture), --rounds times, so a noisy shared host
slows every mode alike; the step time is the median (wall clock, and CPU time of the
process). A captured step is the second of its capture, timed with the end of step that
writes its remaining records: the first, untimed, also checksums every parameter and maps
the module names, which a run does once. msprobe's statistics mode on the same model is timed too when
`mindstudio-probe` is installed (an optional comparison).

Statistics mode reads every new activation and gradient once more, so its cost grows with
the activations while the step's grows with the matmuls: the ratio falls as the model
widens. Each tensor is read once, in place, by accelport's compiled statistics kernel
(src/accelport/verify/numerics/_stats.c: all eight statistics in one pass, float32 lane sums into
float64); run with ACCELPORT_DUMP_NATIVE=0 to time the numpy fallback instead. The rest
of the cost is torch's round trip through a Python dispatch mode per op (about 650 per
step here: AdamW's own ops bypass the capture), the bookkeeping per op (in C by default,
src/accelport/verify/numerics/_recorder.c; ACCELPORT_DUMP_RECORDER=0 times the Python path), the
parameters' records and the manifest. Prints one JSON object with the figures per width;
the target is statistics mode at most 1.3x plain.

    python benchmarks/dump_overhead.py [--rounds 12] [--d-model 256,512] [--layers 4]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch

from accelport.verify.numerics import native, recorder

REPO = Path(__file__).resolve().parents[1]
TARGET = 1.3


def load_example():
    spec = importlib.util.spec_from_file_location(
        "tinylm", REPO / "examples" / "legacy_cuda_app" / "model.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make(args, example):
    torch.manual_seed(0)
    model = example.TinyLM(
        vocab=args.vocab,
        d_model=args.d_model,
        n_heads=args.heads,
        n_layers=args.layers,
        seq_len=args.seq,
    )
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, args.vocab, (args.batch, args.seq), generator=g)
    targets = torch.randint(0, args.vocab, (args.batch, args.seq), generator=g)

    def step():
        optimizer.zero_grad(set_to_none=True)
        example.loss_fn(model(tokens), targets).backward()
        optimizer.step()

    return model, step


def timed(step) -> tuple[float, float]:
    """Wall and CPU seconds of one step (CPU time of this process: all its threads)."""
    wall, cpu = time.perf_counter(), time.process_time()
    step()
    return time.perf_counter() - wall, time.process_time() - cpu


def captured_step(step, folder: Path, tensors: bool) -> tuple[float, float, int, int]:
    """A step in the steady state of a fresh capture: its first step (which also checksums
    every parameter and names the modules) runs untimed, the second is timed together with
    the end of step that writes its last records (as optimizer.step() would do in a run)."""
    from accelport.verify import capture

    shutil.rmtree(folder, ignore_errors=True)
    with capture(folder, tensors=tensors, step_on="manual") as cap:
        step()
        cap.step()
        before = cap.records_written

        def step_and_flush():
            step()
            cap.step()

        wall, cpu = timed(step_and_flush)
        records = cap.records_written - before
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    shutil.rmtree(folder, ignore_errors=True)
    return wall, cpu, records, size // 2


def run_msprobe(args, example, scratch: Path) -> dict | None:
    if importlib.util.find_spec("msprobe") is None:
        return None
    from msprobe.pytorch import PrecisionDebugger  # optional comparison, only when installed

    config = scratch / "msprobe.json"
    config.write_text(
        json.dumps(
            {
                "task": "statistics",
                "dump_path": str(scratch / "msprobe"),
                "level": "L1",
                "rank": [],
                "step": [],
            }
        )
    )
    model, step = make(args, example)
    for _ in range(args.warmup):
        step()
    debugger = PrecisionDebugger(config_path=str(config))
    times = []
    for _ in range(args.rounds):
        start = time.perf_counter()
        debugger.start(model)
        step()
        debugger.stop()
        debugger.step()
        times.append(time.perf_counter() - start)
    shutil.rmtree(scratch / "msprobe", ignore_errors=True)
    return {"median_step_s": statistics.median(times)}


def measure(args: argparse.Namespace, example, scratch: Path) -> dict:
    """All three modes on one model size; the figures for that size."""
    # Three copies of the model, stepped in turn (plain, statistics, tensors) round after
    # round, so a busy host slows each mode alike; medians over the rounds.
    steps = {mode: make(args, example)[1] for mode in ("plain", "statistics", "tensors")}
    for step in steps.values():
        for _ in range(args.warmup):
            step()
    wall: dict[str, list[float]] = {mode: [] for mode in steps}
    cpu: dict[str, list[float]] = {mode: [] for mode in steps}
    records = size_stats = size_tensors = 0
    for _ in range(args.rounds):
        w, c = timed(steps["plain"])
        wall["plain"].append(w)
        cpu["plain"].append(c)
        w, c, records, size_stats = captured_step(steps["statistics"], scratch / "stats", False)
        wall["statistics"].append(w)
        cpu["statistics"].append(c)
        w, c, _, size_tensors = captured_step(steps["tensors"], scratch / "tensors", True)
        wall["tensors"].append(w)
        cpu["tensors"].append(c)
    p, s, t = (statistics.median(wall[m]) for m in ("plain", "statistics", "tensors"))
    pc, sc, tc = (statistics.median(cpu[m]) for m in ("plain", "statistics", "tensors"))
    msprobe = run_msprobe(args, example, scratch)
    result = {
        "model": f"TinyLM d_model={args.d_model} layers={args.layers} heads={args.heads} seq={args.seq} batch={args.batch} vocab={args.vocab}",
        "parameters": sum(x.numel() for x in make(args, example)[0].parameters()),
        "plain_step_s": round(p, 4),
        "statistics_step_s": round(s, 4),
        "tensors_step_s": round(t, 4),
        "statistics_slowdown": round(s / p, 3),
        "tensors_slowdown": round(t / p, 3),
        # Each round's ratio (steps taken one after the other see the same host load), median.
        "statistics_slowdown_paired": round(
            statistics.median(
                st / pl for st, pl in zip(wall["statistics"], wall["plain"], strict=True)
            ),
            3,
        ),
        "tensors_slowdown_paired": round(
            statistics.median(
                te / pl for te, pl in zip(wall["tensors"], wall["plain"], strict=True)
            ),
            3,
        ),
        # Fastest step of each mode: the least disturbed by other load on a shared host.
        "statistics_slowdown_best_steps": round(min(wall["statistics"]) / min(wall["plain"]), 3),
        "tensors_slowdown_best_steps": round(min(wall["tensors"]) / min(wall["plain"]), 3),
        "statistics_cpu_slowdown": round(sc / pc, 3),
        "tensors_cpu_slowdown": round(tc / pc, 3),
        "records_per_step": records,
        "statistics_bytes_per_step": size_stats,
        "tensors_bytes_per_step": size_tensors,
        "msprobe_statistics": msprobe
        if msprobe
        else "not installed (pip install mindstudio-probe to compare)",
        "meets_target": s / p <= TARGET,
        "spread_s": {mode: [round(min(v), 4), round(max(v), 4)] for mode, v in wall.items()},
    }
    if isinstance(msprobe, dict):
        result["msprobe_statistics"]["slowdown"] = round(msprobe["median_step_s"] / p, 3)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=12, help="timed steps per mode, interleaved")
    parser.add_argument(
        "--d-model",
        default="256,512",
        help="model widths to measure, comma-separated (default: %(default)s)",
    )
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=1024)
    args = parser.parse_args()
    load_before = [round(v, 2) for v in os.getloadavg()]
    example = load_example()
    scratch = Path(tempfile.mkdtemp(prefix="accelport-dump-overhead-"))
    sizes = []
    try:
        for width in (int(w) for w in str(args.d_model).split(",")):
            sizes.append(
                measure(argparse.Namespace(**{**vars(args), "d_model": width}), example, scratch)
            )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(
        json.dumps(
            {
                "benchmark": "dump_overhead",
                "torch": torch.__version__,
                "threads": torch.get_num_threads(),
                "cpus": os.cpu_count(),
                "steps_per_mode": args.rounds,
                "target_statistics_slowdown": TARGET,
                "statistics_kernel": "compiled" if native.kernels() is not None else "numpy",
                # The per-op path of statistics mode: C (recorder.py) or Python (Capture._on_op).
                "recorder": "compiled" if recorder.load() is not None else "python",
                "sizes": sizes,
                "load_average_before": load_before,
                "load_average_after": [round(v, 2) for v in os.getloadavg()],
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
