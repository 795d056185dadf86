"""accelport dump and compare on a GPU: the device run against the CPU run of the same model, planted faults, and the cost per step.

Prepared for a lent GPU machine (one run, a few minutes); `--device cpu` runs every step
here, on the CPU against itself, to check the script before spending device time.

    python benchmarks/gpu_dump.py --out DIR [--device cuda] [--widths 256,1024] [--rounds 20]

Checks (exit code 1 when one fails), on the example TinyLM in eval mode (no dropout), three
forward+backward steps each:
  - a capture on the device brings every statistic back from the device batch (none left
    as an index), names the device in its header, and says which recorder ran;
  - fp32 on the device against fp32 on the CPU: compare passes;
  - bf16 autocast on the device against fp32 on the CPU: passes;
  - a weight changed by +0.05 on the device run: fails, first divergence at that parameter;
  - GELU's output scaled by 1.01 on the device (a wrong kernel registered for the device's
    dispatch key): fails, first divergence at aten.gelu in the right module.
Figures: the training-step time (AdamW, train mode) plain and under a statistics capture
on the device for each width (median over --rounds alternating steps, synchronised), and
the records per step. Everything goes to DIR/result.json; a summary is printed.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import shutil
import statistics
import sys
import time
import traceback
import warnings
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from accelport.verify import capture, dumpfile  # noqa: E402
from accelport.verify.compare import compare_dumps  # noqa: E402


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


def step_times(device: str, mod, width: int, rounds: int) -> dict:
    """Training-step time plain and under a statistics capture, alternating, synchronised."""
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    models = {}
    for mode in ("plain", "statistics"):
        torch.manual_seed(0)
        model = mod.TinyLM(vocab=1024, d_model=width, n_heads=8, n_layers=4, seq_len=256).to(device).train()
        models[mode] = (model, torch.optim.AdamW(model.parameters(), lr=1e-4))
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 1024, (16, 256), generator=g).to(device)

    def step(mode):
        model, optimizer = models[mode]
        optimizer.zero_grad(set_to_none=True)
        mod.loss_fn(model(tokens), tokens).backward()
        optimizer.step()

    for mode in models:
        for _ in range(3):
            step(mode)
    times = {"plain": [], "statistics": []}
    folder = Path(f"/tmp/accelport-gpu-dump-{width}")
    records = 0
    for _ in range(rounds):
        sync()
        start = time.perf_counter()
        step("plain")
        sync()
        times["plain"].append(time.perf_counter() - start)
        shutil.rmtree(folder, ignore_errors=True)
        with capture(folder, step_on="manual") as cap:
            step("statistics")
            cap.step()
            before = cap.records_written
            sync()
            start = time.perf_counter()
            step("statistics")
            cap.step()
            sync()
            times["statistics"].append(time.perf_counter() - start)
            records = cap.records_written - before
            recorder = cap.recorder
    shutil.rmtree(folder, ignore_errors=True)
    plain, stats = statistics.median(times["plain"]), statistics.median(times["statistics"])
    return {
        "width": width,
        "plain_step_ms": round(plain * 1e3, 2),
        "statistics_step_ms": round(stats * 1e3, 2),
        "statistics_slowdown": round(stats / plain, 3),
        "records_per_step": records,
        "recorder": recorder,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--widths", default="256,1024")
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    work = args.out / "dumps"
    mod = example()
    result: dict = {"device": args.device, "torch": torch.__version__, "checks": {}, "timing": []}
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
    for width in (int(w) for w in args.widths.split(",")):
        try:
            result["timing"].append(step_times(args.device, mod, width, args.rounds))
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
