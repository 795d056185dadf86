"""Convergence runs: the same model trained from the same seed with plain PyTorch, `patch()` or `enable()`.

Each run writes its loss curve as JSONL (`{"step": i, "loss": x}`), which
`accelport curves REF TEST...` compares: kernels that are right give the same curve
within its tolerance; a planted kernel fault makes the curve leave it. The model
comes from the caller (`model_factory(seed)`), so the tests and the benchmark script
train the HF-style Llama model of `tests/kernels/llama_block.py`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from accelport import fileio

MODES = ("torch", "patch", "enable")


def batches(steps: int, batch: int, seq: int, vocab: int, seed: int, distinct: int = 4) -> list[Any]:
    """`steps` batches of token ids cycling through `distinct` fixed ones, so the loss can fall by memorising them."""
    import torch

    generator = torch.Generator().manual_seed(seed + 1)
    pool = [torch.randint(0, vocab, (batch, seq), generator=generator) for _ in range(distinct)]
    return [pool[i % distinct] for i in range(steps)]


@contextlib.contextmanager
def _mode(mode: str, model: Any, device: str) -> Iterator[None]:
    from accelport import kernels

    if mode == "torch":
        yield
    elif mode == "patch":
        handle = kernels.patch(model, device=device)
        try:
            yield
        finally:
            handle.undo()
    elif mode == "enable":
        with kernels.enable(device=device):
            yield
    else:
        raise ValueError(f"mode {mode!r}: choose one of {', '.join(MODES)}")


def train(
    model_factory: Callable[[int], Any],
    loss_fn: Callable[[Any, Any], Any],
    mode: str,
    out: Path,
    *,
    steps: int,
    seed: int = 0,
    lr: float = 0.1,
    batch: int = 2,
    seq: int = 9,
    vocab: int = 64,
    device: str = "cpu",
) -> list[float]:
    """Train `model_factory(seed)` for `steps` SGD steps (momentum 0.9) in `mode`; write and return the losses.

    SGD, not Adam: Adam normalises each gradient, so a kernel whose gradient is off by a
    constant factor would train the same, and the comparison would not see it.
    """
    import torch

    torch.manual_seed(seed)
    model = model_factory(seed).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    losses: list[float] = []
    with _mode(mode, model, device):
        for ids in batches(steps, batch, seq, vocab, seed):
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model, ids.to(device))
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
    with fileio.atomic_open(out, "w") as handle:
        for step, value in enumerate(losses):
            handle.write(json.dumps({"step": step, "loss": value}) + "\n")
    return losses
