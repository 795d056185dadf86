"""Build a synthetic Python training-repository tree for the inventory and migrate benchmarks.

Like real training repositories, about a quarter of the files use CUDA APIs, each
in one or two places (a device setup, a training step, memory logging), importing
only what it uses; the rest are plain PyTorch and utility code, some with comments,
docstrings and paths that mention CUDA (the near misses grep matches and accelport
must not). The density is calibrated to the issue's own measurement on seven
open-source training repositories: 2,246 grep hits in about 666k lines, i.e. about
3.4 hits per 1,000 lines (this generator gives 3.3 at 500k lines; the benchmarks
print the count they saw). About a third of the hits are near misses. The tree is
deterministic for a given seed, so runs are comparable.

    python benchmarks/synthetic_tree.py OUT_DIR [--lines 500000] [--cuda-fraction 0.25]
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

HEADER = '''"""{title}.

Part of a synthetic training repository generated for accelport benchmarks.
"""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
'''

# Imports a CUDA-using file adds for the blocks that need them.
AMP_IMPORT = "from torch.cuda.amp import GradScaler, autocast\n"
DIST_IMPORT = "import torch.distributed as dist\n"
NEAR_MISS_RATE = 0.018  # chance that a plain block is a near miss

CLEAN_BLOCKS = [
    '''

class Block{n}(nn.Module):
    """A residual MLP block; runs the same on every device."""

    def __init__(self, width={w}, dropout=0.1):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, 4 * width)
        self.fc2 = nn.Linear(4 * width, width)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        h = self.fc1(self.norm(x))
        h = F.gelu(h)
        return x + self.drop(self.fc2(h))
''',
    '''

def cosine_schedule_{n}(step, total, base_lr={lr}, warmup=100):
    # Linear warm-up, then cosine decay to zero.
    if step < warmup:
        return base_lr * step / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.5 * base_lr * (1.0 + math.cos(math.pi * progress))
''',
    '''

def count_parameters_{n}(model, trainable_only=True):
    total = 0
    for parameter in model.parameters():
        if trainable_only and not parameter.requires_grad:
            continue
        total += parameter.numel()
    return total
''',
]

# Blocks whose comments, docstrings or path strings mention CUDA without using it.
NEAR_MISS_BLOCKS = [
    '''

def load_split_{n}(root, split="train"):
    """Read a token file; the path layout mirrors the cuda_cluster export (no device code here)."""
    path = os.path.join(root, "exports", "cuda_cluster_v2", f"{{split}}.bin")
    if not os.path.exists(path):
        raise FileNotFoundError(path)
    with open(path, "rb") as handle:
        data = handle.read()
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).long()
''',
    '''

class Attention{n}(nn.Module):
    def __init__(self, dim={w}, heads=8):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x, mask=None):
        b, t, c = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q = q.view(b, t, self.heads, -1).transpose(1, 2)
        k = k.view(b, t, self.heads, -1).transpose(1, 2)
        v = v.view(b, t, self.heads, -1).transpose(1, 2)
        # Fused kernels on torch.cuda builds are picked automatically by SDPA.
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.out(y.transpose(1, 2).reshape(b, t, c))
''',
    '''

def summarize_{n}(metrics):
    """Format metrics for the log; 'nccl' and 'cudnn' keys come from the profiler export."""
    parts = []
    for key in sorted(metrics):
        value = metrics[key]
        if isinstance(value, float):
            parts.append(f"{{key}}={{value:.4f}}")
        else:
            parts.append(f"{{key}}={{value}}")
    return " ".join(parts)
''',
]

CUDA_BLOCKS = [
    '''

def setup_device_{n}(local_rank=0):
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        return torch.device(f"cuda:{{local_rank}}")
    return torch.device("cpu")
''',
    '''

def train_step_{n}(model, batch, optimizer, scaler):
    inputs, targets = batch
    inputs = inputs.cuda(non_blocking=True)
    targets = targets.to("cuda", non_blocking=True)
    optimizer.zero_grad(set_to_none=True)
    with autocast():
        loss = F.cross_entropy(model(inputs), targets)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()
''',
    '''

def init_distributed_{n}():
    if "RANK" not in os.environ:
        return 0, 1
    dist.init_process_group(backend="nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    return dist.get_rank(), dist.get_world_size()
''',
    '''

def report_memory_{n}(tag=""):
    allocated = torch.cuda.memory_allocated() / 2**30
    peak = torch.cuda.max_memory_allocated() / 2**30
    torch.cuda.synchronize()
    print(f"[{{tag}}] allocated={{allocated:.2f}} GiB peak={{peak:.2f}} GiB")
    torch.cuda.reset_peak_memory_stats()
''',
    '''

def time_forward_{n}(model, x, repeats=10):
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        model(x)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / repeats
''',
    '''

def configure_backends_{n}(deterministic=False):
    torch.backends.cudnn.benchmark = not deterministic
    torch.backends.cudnn.deterministic = deterministic
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.cuda.manual_seed_all(1234)
    os.environ.setdefault("NCCL_DEBUG", "WARN")
''',
]


def build_python_tree(root: Path, lines: int = 500_000, cuda_fraction: float = 0.25, seed: int = 0) -> dict:
    """Write the tree under `root`; returns what was built (files, lines, CUDA files)."""
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    written = files = cuda_files = 0
    packages = ["models", "data", "train", "utils", "eval", "serving", "ops", "configs"]
    while written < lines:
        package = packages[files % len(packages)]
        folder = root / "repo" / package / f"group{files // 200:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        uses_cuda = rng.random() < cuda_fraction
        parts = [HEADER.format(title=f"{package} module {files}")]
        target = rng.randint(150, 450)
        # A CUDA-using file touches CUDA in one place, or (one file in three) two, like real training code.
        cuda_slots = set(rng.sample(range(12), rng.choice((1, 1, 2)))) if uses_cuda else set()
        count = 0
        touched = False
        body_lines = parts[0].count("\n")
        while body_lines < target:
            if count in cuda_slots:
                block = rng.choice(CUDA_BLOCKS)
                touched = True
            elif rng.random() < NEAR_MISS_RATE:
                block = rng.choice(NEAR_MISS_BLOCKS)
            else:
                block = rng.choice(CLEAN_BLOCKS)
            text = block.format(n=count, w=rng.choice([256, 512, 1024]), lr=rng.choice([1e-3, 3e-4]))
            parts.append(text)
            body_lines += text.count("\n")
            count += 1
        imports = [line for line, word in ((AMP_IMPORT, "autocast()"), (DIST_IMPORT, "dist.")) if any(word in part for part in parts[1:])]
        if imports:
            parts.insert(1, "".join(imports))
        source = "".join(parts)
        (folder / f"module_{files:05d}.py").write_text(source)
        written += source.count("\n")
        files += 1
        cuda_files += touched
    return {"root": str(root), "files": files, "lines": written, "cuda_files": cuda_files}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--lines", type=int, default=500_000)
    parser.add_argument("--cuda-fraction", type=float, default=0.25)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(json.dumps(build_python_tree(args.out, args.lines, args.cuda_fraction, args.seed)))


if __name__ == "__main__":
    main()
