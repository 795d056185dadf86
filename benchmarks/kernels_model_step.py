"""One training step (forward + backward) of an HF-style Llama model: plain PyTorch vs patch() vs enable().

Prints one JSON object: per mode the median step time, the peak device memory, the loss
(the three must agree), and the ratios to PyTorch measured in this run. On a GPU the model
is one Llama-7B-class decoder layer (hidden 4096, 32 heads over 8 KV heads, MLP 11008,
vocabulary 32000) over `--batch` x `--seq` tokens; on CPU (the dry run) it is the tests'
tiny model under the Triton interpreter, whose times say nothing about a GPU, and no
peak memory is reported.

    python benchmarks/kernels_model_step.py [--device cuda] [--dtype bfloat16] [--seq 2048] [--batch 1] [--layers 1]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LLAMA_7B_LAYER = {
    "hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32, "num_key_value_heads": 8,
    "vocab_size": 32000,
}  # fmt: skip
TINY = {"hidden_size": 16, "intermediate_size": 32, "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 32}


def _training_step(model, ids, losses: list[float], loss_of):
    def step() -> None:
        model.zero_grad(set_to_none=True)
        loss = loss_of(model, ids)
        loss.backward()
        losses.append(float(loss.detach()))

    return step


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default=None, help="torch device (default: the accelerator torch sees, else cpu)")
    parser.add_argument("--dtype", default="bfloat16", choices=("float32", "float16", "bfloat16"))
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seq", type=int, default=None, help="tokens per sequence (default: 2048 on a GPU, 9 on CPU)")
    parser.add_argument("--layers", type=int, default=1)
    parser.add_argument("--budget", type=float, default=2.0, help="seconds of timed steps per mode (default: %(default)s)")
    parser.add_argument("-o", "--output", type=Path, help="also write the JSON here")
    args = parser.parse_args(argv)
    if (args.device or "cpu").startswith("cpu") and "triton" not in sys.modules:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    sys.path.insert(0, str(REPO))  # the model is the tests' HF-style Llama

    import torch
    from tests.kernels import llama_block

    from accelport import fileio, kernels
    from accelport.kernels import bench

    device = args.device or (str(torch.accelerator.current_accelerator()) if torch.accelerator.is_available() else "cpu")
    bench.check_device(device)
    on_cpu = torch.device(device).type == "cpu"
    config = {**(TINY if on_cpu else LLAMA_7B_LAYER), "num_hidden_layers": args.layers}
    dtype = torch.float32 if on_cpu else getattr(torch, args.dtype)
    seq = args.seq or (9 if on_cpu else 2048)
    ids = torch.randint(0, config["vocab_size"], (args.batch, seq + 1), generator=torch.Generator().manual_seed(0)).to(device)
    memory = None if on_cpu else torch.get_device_module(torch.device(device).type)

    results = {}
    for mode in ("torch", "patch", "enable"):
        model = llama_block.build(0, dtype=dtype, **config).to(device)
        handle = kernels.patch(model, device=device) if mode == "patch" else None
        takeover = kernels.enable(device=device) if mode == "enable" else None
        losses: list[float] = []
        step = _training_step(model, ids, losses, llama_block.loss_of)
        try:
            if memory is not None:
                torch.accelerator.synchronize()
                memory.reset_peak_memory_stats()
            ms = bench.time_ms(step, device, min_reps=1 if on_cpu else 3, budget_s=0 if on_cpu else args.budget)
            peak = None if memory is None else memory.max_memory_allocated() / 2**20
        finally:
            if handle is not None:
                handle.undo()
            if takeover is not None:
                takeover.disable()
        results[mode] = {"ms": round(ms, 3), "peak_mib": None if peak is None else round(peak, 1), "loss": losses[-1]}
        if takeover is not None:
            results[mode]["taken_over"] = {t.aten: t.calls for t in takeover.takeovers}
        if handle is not None:
            results[mode]["replaced"] = [e.path for e in handle.replaced]
    base = results["torch"]
    for mode in ("patch", "enable"):
        r = results[mode]
        r["speedup_vs_torch"] = round(base["ms"] / r["ms"], 3)
        r["memory_vs_torch"] = None if r["peak_mib"] is None else round(r["peak_mib"] / base["peak_mib"], 3)
        r["loss_gap"] = abs(r["loss"] - base["loss"]) / max(abs(base["loss"]), 1e-12)
    report = {
        "benchmark": "HF-style Llama training step: torch vs accelport patch() / enable()",
        "device": device,
        "dtype": str(dtype).removeprefix("torch."),
        "model": {**config, "batch": args.batch, "seq": seq},
        "results": results,
        "note": "CPU: Triton interpreter, tiny model; times are not a GPU measurement and no peak memory is reported"
        if on_cpu else "median step time (forward + backward) after a warm-up; peak memory allocated during the timed steps",
    }  # fmt: skip
    text = json.dumps(report, indent=2) + "\n"
    if args.output:
        with fileio.atomic_open(args.output, "w") as handle_out:
            handle_out.write(text)
    sys.stdout.write(text)
    # The kernels must compute the same loss as torch (bf16: one rounding per op apart).
    tolerance = 1e-4 if dtype == torch.float32 else 5e-2
    return 0 if all(results[m]["loss_gap"] <= tolerance for m in ("patch", "enable")) else 1


if __name__ == "__main__":
    sys.exit(main())
