"""Helpers for the numerics tests: run the example TinyLM under a capture, with or without a planted fault."""

from __future__ import annotations

import contextlib
import importlib.util
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from torch import nn

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "legacy_cuda_app" / "model.py"


def example_model():
    """examples/legacy_cuda_app/model.py, imported by path (the example is not a package)."""
    name = "accelport_test_tinylm"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, EXAMPLE)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@contextlib.contextmanager
def buggy_relu(scale: float = 1.01) -> Iterator[None]:
    """Replace the CPU kernel of aten::relu with one whose output is `scale` times too large.

    This is what a wrong vendor kernel looks like from PyTorch: the same ATen op, a wrong result.
    """
    library = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():
        warnings.simplefilter(
            "ignore", UserWarning
        )  # "overriding a previously registered kernel": the point
        library.impl("relu", lambda x: torch.clamp_min(x, 0) * scale, "CPU")
    try:
        yield
    finally:
        library._destroy()


def tinylm(relu: bool = False, seed: int = 0) -> nn.Module:
    model = example_model().build_model(seed=seed)
    if relu:
        for block in model.blocks:
            block.mlp[1] = nn.ReLU()
    return model.eval()


def train_step(model: nn.Module, autocast: torch.dtype | None = None, batch: int = 2) -> None:
    """One forward and backward pass of TinyLM on the example batch."""
    mod = example_model()
    tokens, targets = mod.example_batch(batch_size=batch, seq_len=16)
    context = (
        torch.autocast("cpu", dtype=autocast) if autocast is not None else contextlib.nullcontext()
    )
    with context:
        loss = mod.loss_fn(model(tokens), targets)
    loss.backward()


def dump(
    folder: Path, model: nn.Module, step: Callable[[nn.Module], None] = train_step, **options
) -> Path:
    from accelport.verify import capture

    torch.manual_seed(0)
    with capture(folder, step_on="manual", **options):
        step(model)
    return folder
