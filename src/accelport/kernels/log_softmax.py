"""Log-softmax over the last dimension (forward and backward), fp32 math: the softmax kernels with LOG set.

y = x - max(x) - log(sum(exp(x - max(x)))); the backward is dx = dy - exp(y) * sum(dy),
which needs only the output. A row wider than one tile takes the online pass.
"""

from __future__ import annotations

from typing import Any

import torch

from accelport.kernels import _rows, softmax
from accelport.kernels.registry import Case, Inputs, Operator

NAME = "log_softmax"


def reference(x: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(x, dim=-1, dtype=torch.float32).to(x.dtype)


def torch_op(x: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(x, dim=-1)


class LogSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        y = softmax.forward(x, log=True)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> torch.Tensor:
        (y,) = ctx.saved_tensors
        return softmax.backward(y, dy, log=True)


def log_softmax(x: torch.Tensor) -> torch.Tensor:
    """The Triton implementation, differentiable."""
    return LogSoftmax.apply(x)


def make_inputs(case: Case, dtype: torch.dtype, device: Any, generator: torch.Generator) -> Inputs:
    return Inputs(args=(_rows.random_rows(case, dtype, device, generator, scale=4.0),), grad=(0,))


OPERATOR = Operator(
    name=NAME,
    summary="log-softmax over the last dimension, fp32 math (fwd+bwd)",
    reference=reference,
    triton=log_softmax,
    make_inputs=make_inputs,
    cases=(
        Case("ragged", {"rows": 5, "cols": 300}),
        Case("looped", {"rows": 3, "cols": 700}, config={"softmax": {"BLOCK": 256, "num_warps": 4}}),
    ),
    device_cases=(Case("4096x32000", {"rows": 4096, "cols": 32000}),),
    bench_cases=(Case("4096x128256", {"rows": 4096, "cols": 128256}),),
    cost=lambda case, dtype: _rows.streaming_cost(case, dtype, reads=1, writes=1, flops_per_element=4),
    torch_op=torch_op,
    config_space=softmax.SPACE,
    problem=_rows.problem,
    backward=True,
    tolerances={"float32": (1e-5, 1e-5), "float16": (2e-3, 2e-3), "bfloat16": (1.6e-2, 1.6e-2)},
)
