"""Factories for `accelport ops`: one training step, or one inference call, of TinyLM.

    accelport ops examples/legacy_cuda_app/coverage_case.py:factory --target npu musa mlu xpu
    accelport ops examples/legacy_cuda_app/coverage_case.py:inference

accelport calls a factory with the meta device as the default, so the model costs no memory.
The batch is made on the CPU on purpose: example_batch draws from a CPU generator, and a few
integer tokens cost nothing; accelport moves them to the tracing device itself.
"""

import torch
from model import build_model, example_batch, loss_fn


def factory():
    """(model, inputs, loss_fn, targets): forward, cross-entropy, backward, AdamW step."""
    model = build_model(seed=0)
    with torch.device("cpu"):
        tokens, targets = example_batch(batch_size=4)
    return model, (tokens,), loss_fn, targets


def inference():
    """(model, inputs) with the model in eval mode: one forward pass under no_grad."""
    model = build_model(seed=0).eval()
    with torch.device("cpu"):
        tokens, _ = example_batch(batch_size=4)
    return model, (tokens,)
