"""accelport dump and compare on a GPU: the device run against the CPU run of the same model, planted faults, and the cost per step.

Prepared for a lent GPU machine (one run, a few minutes); `--device cpu` runs every step
here, on the CPU against itself, to check the script before spending device time, and
`--dry-run` does so with tiny sizes (width 64, 2 rounds; the fused statistics kernel runs
under TRITON_INTERPRET=1), as tests/verify/test_gpu_dump_script.py does.

    python benchmarks/gpu_dump.py --out DIR [--device cuda] [--widths 256,1024] [--rounds 20] [--dry-run]

Checks (exit code 1 when one fails), on the example TinyLM in eval mode (no dropout), three
forward+backward steps each:
  - a capture on the device brings every statistic back from the device batch (none left
    as an index), names the device in its header, and says which recorder ran;
  - fp32 on the device against fp32 on the CPU: compare passes;
  - bf16 autocast on the device against fp32 on the CPU: passes;
  - a weight changed by +0.05 on the device run: fails, first divergence at that parameter;
  - GELU's output scaled by 1.01 on the device (a wrong kernel registered for the device's
    dispatch key): fails, first divergence at aten.gelu in the right module.
  - the fused statistics kernel (verify/stats_kernel.py) on device tensors of every dtype
    against the float64 reference.
Figures: the training-step time (AdamW, train mode) plain, under a statistics capture with
the fused Triton kernel (the device default) and with the former torch ops
(ACCELPORT_DUMP_STATS_KERNEL=torch), for each width (median over --rounds alternating
steps, synchronised), the ratios to the plain step (targets: <= 3 at 256, <= 2 at 1024),
the records and the statistics kernel launches per step. Everything goes to DIR/result.json; a summary is printed.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import math
import os
import shutil
import statistics
import sys
import time
import traceback
import warnings
from pathlib import Path

if "--dry-run" in sys.argv:
    os.environ.setdefault("TRITON_INTERPRET", "1")  # read when triton is imported: before anything imports it

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from accelport.verify import capture  # noqa: E402
from accelport.verify.numerics import dumpfile, stats_kernel  # noqa: E402
from accelport.verify.numerics.compare import compare_dumps  # noqa: E402
from accelport.verify.numerics.dump import STATS_KERNEL_VAR  # noqa: E402


def example():
    spec = importlib.util.spec_from_file_location("tinylm", REPO / "examples" / "legacy_cuda_app" / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_dump(folder: Path, device: str, mod, fault=None, autocast: torch.dtype | None = None) -> Path:
    """Three forward+backward steps of TinyLM (eval mode, same weights and batch) under a capture."""
    model = mod.build_model(seed=0).eval().to(device)
    if fault == "weight":
        with torch.no_grad():
            model.blocks[0].mlp[2].weight[3, 5] += 0.05
    tokens, targets = mod.example_batch(batch_size=4, device=device)
    shutil.rmtree(folder, ignore_errors=True)
    context = torch.autocast(device.split(":")[0], dtype=autocast) if autocast else contextlib.nullcontext()
    with capture(folder, step_on="manual") as cap:
        for _ in range(3):
            model.zero_grad(set_to_none=True)
            with context:
                loss = mod.loss_fn(model(tokens), targets)
            loss.backward()
            cap.step()
    return folder


@contextlib.contextmanager
def buggy_gelu(device: str, scale: float = 1.01):
    """aten::gelu on the device's dispatch key replaced by one whose output is `scale` too large."""
    key = {"cuda": "CUDA", "cpu": "CPU", "xpu": "XPU"}.get(device.split(":")[0], "PrivateUse1")
    library = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # overriding a registered kernel: the point
        library.impl(
            "gelu",
            lambda x, approximate="none": 0.5 * x * (1 + torch.erf(x / 2**0.5)) * scale,
            key,
        )
    try:
        yield
    finally:
        library._destroy()


def verdict(ref: Path, test: Path) -> dict:
    with compare_dumps(ref, test) as result:
        first = result.first_divergence or {}
        return {
            "verdict": result.verdict,
            "reasons": result.reasons[:3],
            "first_divergence": {k: v for k, v in first.items() if not isinstance(v, dict | list)} if first else None,
            "counts": result.counts,
        }


def check_capture(folder: Path, device: str) -> dict:
    header = dumpfile.read_header(folder)
    left = ops = 0
    for r in dumpfile.iter_records(folder):
        ops += r.get("k") == "op"
        left += sum(isinstance(d.get("stats"), int) for d in (*r.get("in", []), *r.get("out", [])))
    return {
        "recorder": header.get("recorder"),
        "accelerator": (header.get("machine") or {}).get("torch", {}).get("accelerator"),
        "ops": ops,
        "stats_left_as_index": left,
        "ok": not left and ops > 0,
    }


def step_times(device: str, mod, width: int, rounds: int, seq: int = 256, batch: int = 16) -> dict:
    """Training-step time plain and under a statistics capture, alternating, synchronised."""
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    models = {}
    modes = ("plain", "statistics", "statistics_torch_ops")
    for mode in modes:
        torch.manual_seed(0)
        model = mod.TinyLM(vocab=1024, d_model=width, n_heads=8, n_layers=4, seq_len=seq).to(device).train()
        models[mode] = (model, torch.optim.AdamW(model.parameters(), lr=1e-4))
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 1024, (batch, seq), generator=g).to(device)

    def step(mode):
        model, optimizer = models[mode]
        optimizer.zero_grad(set_to_none=True)
        mod.loss_fn(model(tokens), tokens).backward()
        optimizer.step()

    for mode in models:
        for _ in range(3):
            step(mode)
    times: dict[str, list[float]] = {mode: [] for mode in modes}
    folder = Path(f"/tmp/accelport-gpu-dump-{width}")
    records = launches = 0
    recorder = None
    for _ in range(rounds):
        sync()
        start = time.perf_counter()
        step("plain")
        sync()
        times["plain"].append(time.perf_counter() - start)
        for mode, kernel in (("statistics", "auto"), ("statistics_torch_ops", "torch")):
            shutil.rmtree(folder, ignore_errors=True)
            os.environ[STATS_KERNEL_VAR] = kernel  # read by each capture when it starts
            try:
                with capture(folder, step_on="manual") as cap:
                    step(mode)
                    cap.step()
                    before = cap.records_written
                    fused_before = sum(b.launches for b in cap._stats._batches.values() if b is not None)
                    sync()
                    start = time.perf_counter()
                    step(mode)
                    cap.step()
                    sync()
                    times[mode].append(time.perf_counter() - start)
                    if mode == "statistics":
                        records = cap.records_written - before
                        launches = sum(b.launches for b in cap._stats._batches.values() if b is not None) - fused_before
                        recorder = cap.recorder
            finally:
                os.environ.pop(STATS_KERNEL_VAR, None)
    shutil.rmtree(folder, ignore_errors=True)
    plain = statistics.median(times["plain"])
    fused, torch_ops = statistics.median(times["statistics"]), statistics.median(times["statistics_torch_ops"])
    target = 3.0 if width <= 256 else 2.0
    return {
        "width": width,
        "plain_step_ms": round(plain * 1e3, 2),
        "statistics_step_ms": round(fused * 1e3, 2),
        "statistics_slowdown": round(fused / plain, 3),
        "statistics_torch_ops_step_ms": round(torch_ops * 1e3, 2),
        "statistics_torch_ops_slowdown": round(torch_ops / plain, 3),
        "target_slowdown_max": target,
        "meets_target": fused / plain <= target,
        "records_per_step": records,
        "fused_kernel_launches_per_step": launches,
        "recorder": recorder,
    }


def check_stats_kernel(device: str) -> dict:
    """The fused kernel on `device` against the float64 reference, every dtype the capture sends it."""
    if not stats_kernel.available(torch.device(device)):
        return {"ok": False, "error": f"the fused statistics kernel cannot run on {device} (no Triton backend, or no interpreter)"}
    batch = stats_kernel.Batch(torch, torch.device(device), programs=4 if device == "cpu" else None, block=16 if device == "cpu" else None)
    g = torch.Generator().manual_seed(0)
    cases = []
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32, torch.uint8, torch.bool):
        x = torch.randn(200, generator=g, dtype=torch.float64) * 3
        x[1], x[2], x[3] = math.nan, math.inf, 0.0
        x = x.lt(0.5) if dtype == torch.bool else (x.nan_to_num(0.0, 0.0).abs() if not dtype.is_floating_point else x).to(dtype)
        cases.append((str(dtype), x, batch.add(x.to(device).reshape(-1))))
    rows = batch.finish()
    bad = []
    for name, x, slot in cases:
        want, got = stats_kernel.reference(x), rows[slot]
        if not all(math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9) or a == b for a, b in zip(got, want, strict=True)):
            bad.append({"dtype": name, "kernel": got, "reference": want})
    return {"ok": not bad, "cases": len(cases), "mismatches": bad, "launches": batch.launches}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--widths", default="256,1024")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--dry-run", action="store_true", help="on the CPU, tiny sizes: check the script, not the device")
    args = parser.parse_args()
    if args.dry_run:
        args.device, args.widths, args.rounds = "cpu", "64", 2
    args.out.mkdir(parents=True, exist_ok=True)
    work = args.out / "dumps"
    mod = example()
    result: dict = {"device": args.device, "dry_run": args.dry_run, "torch": torch.__version__, "checks": {}, "timing": []}
    if args.device.startswith("cuda"):
        result["gpu"] = torch.cuda.get_device_name()
    checks = result["checks"]

    def attempt(name, fn):
        started = time.perf_counter()
        try:
            checks[name] = fn()
        except Exception as exc:  # one failing check must not hide the others
            checks[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-2000:]}
        checks[name]["seconds"] = round(time.perf_counter() - started, 2)
        print(name, json.dumps({k: v for k, v in checks[name].items() if k != "trace"}), flush=True)

    cpu = run_dump(work / "cpu", "cpu", mod)
    attempt("device_capture", lambda: check_capture(run_dump(work / "dev", args.device, mod), args.device))

    def passes(test):
        found = verdict(cpu, test)
        return {**found, "ok": found["verdict"] == "pass"}

    attempt("fp32_vs_cpu", lambda: passes(work / "dev"))
    attempt("bf16_autocast_vs_cpu", lambda: passes(run_dump(work / "bf16", args.device, mod, autocast=torch.bfloat16)))

    def weight():
        found = verdict(cpu, run_dump(work / "weight", args.device, mod, fault="weight"))
        first = found["first_divergence"] or {}
        ok = found["verdict"] == "fail" and (first.get("op"), first.get("module")) == ("param:weight", "TinyLM.blocks.0.mlp.2")
        return {**found, "ok": ok}

    def gelu():
        with buggy_gelu(args.device):
            test = run_dump(work / "gelu", args.device, mod)
        found = verdict(cpu, test)
        first = found["first_divergence"] or {}
        ok = found["verdict"] == "fail" and (first.get("op"), first.get("module")) == ("aten.gelu.default", "TinyLM.blocks.0.mlp.1")
        return {**found, "ok": ok}

    attempt("weight_plus_0.05", weight)
    attempt("gelu_scaled_1.01", gelu)
    attempt("stats_kernel", lambda: check_stats_kernel(args.device))
    for width in (int(w) for w in args.widths.split(",")):
        try:
            sizes = {"seq": 16, "batch": 2} if args.dry_run else {}
            result["timing"].append(step_times(args.device, mod, width, args.rounds, **sizes))
        except Exception as exc:
            result["timing"].append({"width": width, "error": f"{type(exc).__name__}: {exc}"})
        print("timing", json.dumps(result["timing"][-1]), flush=True)
    shutil.rmtree(work, ignore_errors=True)
    result["ok"] = all(c.get("ok") for c in checks.values())
    (args.out / "result.json").write_text(json.dumps(result, indent=2))
    print("ok" if result["ok"] else "FAILED", flush=True)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
