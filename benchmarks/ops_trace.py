"""How fast and how lean `accelport ops` traces a ~1B-parameter Llama-shaped training step.

Prints one JSON object: the meta-device trace of the full model (forward, backward, AdamW
step) next to one real CPU step of a copy about 100x smaller, measured in the same run.
Every measurement runs in a fresh subprocess, so peak RSS is that of the measured work
(plus `import torch`, reported separately) and nothing is warm from an earlier one.

    .venv/bin/python benchmarks/ops_trace.py            # targets: 1B trace < 10 s and < 1 GB RSS
    .venv/bin/python benchmarks/ops_trace.py --small    # same run on a few-million-parameter pair (seconds; for tests)

With --small the "trace_1b" entry holds the larger model of the small pair and no targets
are judged (they are for the 1B model).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

HERE = Path(__file__).resolve()

# TinyLlama-1.1B's shapes (hidden 2048, MLP 5632, 22 layers, 32 heads, 4 KV heads, vocab 32000).
LLAMA_1B = {"vocab": 32000, "dim": 2048, "hidden": 5632, "layers": 22, "heads": 32, "kv_heads": 4}
# The same architecture about 100x smaller (head size 32 instead of 64, 8 query heads per KV head kept).
LLAMA_SMALL = {"vocab": 3200, "dim": 256, "hidden": 688, "layers": 14, "heads": 8, "kv_heads": 1}
BATCH, SEQ = 2, 256
# --small: the same architecture at a size that traces and runs in seconds (about 30x apart).
LLAMA_TINY = {"vocab": 4096, "dim": 256, "hidden": 704, "layers": 4, "heads": 8, "kv_heads": 2}
LLAMA_TINIER = {"vocab": 512, "dim": 64, "hidden": 176, "layers": 2, "heads": 4, "kv_heads": 1}
SMALL_SEQ = 32
SMALL_ENV = "ACCELPORT_OPS_TRACE_SMALL"  # set in the children of a --small run


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.q = nn.Linear(dim, dim, bias=False)
        self.k = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.v = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.o = nn.Linear(dim, dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.q(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return self.o(out.transpose(1, 2).reshape(b, t, -1))


class Block(nn.Module):
    def __init__(self, dim: int, hidden: int, heads: int, kv_heads: int) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(dim)
        self.attn = Attention(dim, heads, kv_heads)
        self.mlp_norm = RMSNorm(dim)
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), cos, sin)
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class LlamaShaped(nn.Module):
    def __init__(self, vocab: int, dim: int, hidden: int, layers: int, heads: int, kv_heads: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim, hidden, heads, kv_heads) for _ in range(layers))
        self.norm = RMSNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        head_dim = dim // heads
        self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim)), persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device).float()
        angles = torch.outer(positions, self.inv_freq)
        angles = torch.cat((angles, angles), dim=-1)
        cos, sin = angles.cos(), angles.sin()
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x, cos, sin)
        return self.head(self.norm(x))


def _small() -> bool:
    return os.environ.get(SMALL_ENV) == "1"


def _workload(shape: dict) -> tuple:
    model = LlamaShaped(**shape)
    seq = SMALL_SEQ if _small() else SEQ
    with torch.device("cpu"):
        generator = torch.Generator().manual_seed(0)
        tokens = torch.randint(0, shape["vocab"], (BATCH, seq + 1), generator=generator)
    loss = lambda logits, targets: F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))  # noqa: E731
    return model, (tokens[:, :-1],), loss, tokens[:, 1:]


def llama_1b() -> tuple:
    return _workload(LLAMA_TINY if _small() else LLAMA_1B)


def llama_small() -> tuple:
    return _workload(LLAMA_TINIER if _small() else LLAMA_SMALL)


def _rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def child(which: str) -> dict:
    """One measurement in this (fresh) process."""
    from accelport.coverage import trace

    result: dict = {"rss_after_import_mb": round(_rss_mb(), 1)}
    factory = {"trace_1b": "llama_1b", "trace_small": "llama_small", "cpu_small": "llama_small"}[which]
    strategy = "cpu" if which == "cpu_small" else "meta"
    started = time.perf_counter()
    traced = trace(f"{HERE}:{factory}", mode="train", strategy=strategy)
    result["seconds"] = round(time.perf_counter() - started, 3)
    result["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    result["parameters"] = traced.parameters
    result["operators"] = len(traced.judged())
    result["calls"] = traced.total_calls
    result["op_set"] = sorted(traced.normalised_ops())
    if which == "trace_1b":
        # A second trace in the same process: the cost without torch's one-time lazy imports.
        started = time.perf_counter()
        trace(f"{HERE}:{factory}", mode="train", strategy=strategy)
        result["warm_seconds"] = round(time.perf_counter() - started, 3)
    return result


def measure(which: str, small: bool) -> dict:
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0", OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "2"))
    env[SMALL_ENV] = "1" if small else "0"
    done = subprocess.run([sys.executable, str(HERE), "--child", which], capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise SystemExit(f"ops_trace: {which} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--child", choices=("trace_1b", "trace_small", "cpu_small"), help=argparse.SUPPRESS)
    parser.add_argument("--small", action="store_true", help="a few-million-parameter pair instead of 1B and 10M (seconds)")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child)))
        return 0
    big = measure("trace_1b", args.small)
    small_meta = measure("trace_small", args.small)
    small_cpu = measure("cpu_small", args.small)
    targets = None if args.small else {"trace_seconds_lt_10": big["seconds"] < 10, "peak_rss_lt_1gb": big["peak_rss_mb"] < 1024}
    report = {
        "benchmark": "ops_trace",
        "size": "small" if args.small else "full",
        "torch": torch.__version__,
        "cpus": os.cpu_count(),
        "batch": BATCH,
        "seq_len": SMALL_SEQ if args.small else SEQ,
        "step": "forward + cross-entropy + backward + AdamW(foreach) step",
        "trace_1b": {
            "parameters": big["parameters"],
            "strategy": "meta",
            "seconds": big["seconds"],
            "warm_seconds": big["warm_seconds"],
            "peak_rss_mb": big["peak_rss_mb"],
            "rss_after_import_torch_mb": big["rss_after_import_mb"],
            "operators": big["operators"],
            "calls": big["calls"],
        },
        "cpu_step_small": {
            "parameters": small_cpu["parameters"],
            "size_ratio": round(big["parameters"] / small_cpu["parameters"], 1),
            "seconds": small_cpu["seconds"],
            "peak_rss_mb": small_cpu["peak_rss_mb"],
            "operators": small_cpu["operators"],
        },
        "meta_trace_small_seconds": small_meta["seconds"],
        "small_meta_ops_equal_cpu_ops": small_meta["op_set"] == small_cpu["op_set"],
        "ops_1b_equal_ops_small": big["op_set"] == small_cpu["op_set"],
        "targets": targets,
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
