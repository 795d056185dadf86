"""Convergence proof, long version: an HF-style Llama trained for hundreds of steps with plain PyTorch, patch() and
enable() from one seed, plus the same patch() run with a planted RMSNorm-backward fault; `accelport curves` judges
each against the PyTorch curve. Prints one JSON object (gaps, verdicts, seconds per run).

    python benchmarks/kernels_convergence.py [--steps 300] [--device cpu] [--out DIR] [--tolerance 0.001]

On CPU the kernels run under the Triton interpreter (set here): about 0.5 s per step of the tiny model, so 300
steps of the three kernel runs take about 8 minutes. The short version is tests/kernels/test_convergence.py.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", type=Path, help="folder for the JSONL curves (default: a temporary one)")
    parser.add_argument("--tolerance", default="0.001", help="accelport curves --tolerance (default: %(default)s)")
    parser.add_argument("--no-fault", action="store_true", help="skip the planted-fault run")
    args = parser.parse_args(argv)
    if args.device == "cpu" and "triton" not in sys.modules:
        os.environ["TRITON_INTERPRET"] = "1"
    sys.path.insert(0, str(REPO))  # the model is the tests' HF-style Llama

    from tests.kernels import llama_block
    from tests.kernels.mutants import load_copy

    from accelport.cli import main as accelport
    from accelport.kernels import convergence, rms_norm

    config = {"hidden_size": 16, "intermediate_size": 32, "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 32}
    out = args.out or Path(tempfile.mkdtemp(prefix="accelport-convergence-"))
    runs: dict[str, dict] = {}

    def run(name: str, mode: str) -> Path:
        path = out / f"{name}.jsonl"
        started = time.perf_counter()
        losses = convergence.train(
            lambda seed: llama_block.build(seed, **config), llama_block.loss_of, mode, path, steps=args.steps,
            vocab=config["vocab_size"], lr=0.1, device=args.device,
        )  # fmt: skip
        runs[name] = {"mode": mode, "seconds": round(time.perf_counter() - started, 2), "first_loss": losses[0], "last_loss": losses[-1]}
        return path

    reference = run("torch", "torch")
    tests = [run("patch", "patch"), run("enable", "enable")]
    if not args.no_fault:
        mutant = load_copy(
            "accelport.kernels.rms_norm", out, "dx = rstd * (dyw - x_hat * (tl.sum(dyw * x_hat, axis=0) / n_cols))", "dx = rstd * dyw"
        )
        real = rms_norm._rms_norm_bwd
        rms_norm._rms_norm_bwd = mutant._rms_norm_bwd
        try:
            tests.append(run("patch-faulty", "patch"))
        finally:
            rms_norm._rms_norm_bwd = real
    verdicts = {}
    for path in tests:
        report = out / f"{path.stem}-curves.json"
        code = accelport(["curves", str(reference), str(path), "--tolerance", args.tolerance, "--format", "json", "-o", str(report)])
        data = json.loads(report.read_text())
        loss = next(m for m in data["metrics"] if m["metric"] == "loss")
        verdicts[path.stem] = {"exit": code, "verdict": data["verdict"], "max_gap": loss["max_gap"], "final_gap": loss["final_gap"]}
    expected = {"patch": "pass", "enable": "pass", "patch-faulty": "fail"}
    ok = all(verdicts[name]["verdict"] == expected[name] for name in verdicts)
    print(json.dumps({"benchmark": "kernels convergence", "steps": args.steps, "device": args.device, "curves": str(out),
                      "runs": runs, "verdicts": verdicts, "as_expected": ok}, indent=2))  # fmt: skip
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
