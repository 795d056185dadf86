"""GEGLU (forward and backward): y = gelu_tanh(gate) * up, elementwise, fp32 math.

The feed-forward gate of Gemma-style MLPs (`gelu_pytorch_tanh`). The kernels are the
GLU kernels of `swiglu` with the tanh-approximated GELU, whose tanh is built from the
sigmoid; the backward recomputes the activation.
"""

from __future__ import annotations

import torch

from accelport.kernels import _rows, swiglu
from accelport.kernels.registry import Case, Cost, Operator

NAME = "geglu"


def reference(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return (torch.nn.functional.gelu(gate.float(), approximate="tanh") * up.float()).to(gate.dtype)


def torch_op(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(gate, approximate="tanh") * up


def geglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """The Triton implementation, differentiable in gate and up."""
    return swiglu.GLU.apply(gate, up, swiglu.GELU_TANH)


def _cost(case: Case, dtype: str) -> Cost:
    return _rows.streaming_cost(case, dtype, reads=2, writes=1, flops_per_element=12)


OPERATOR = Operator(
    name=NAME,
    summary="gelu_tanh(gate) * up, elementwise, fp32 math (fwd+bwd)",
    reference=reference,
    triton=geglu,
    make_inputs=swiglu.make_inputs,
    cases=(
        Case("ragged", {"rows": 7, "cols": 300}, config={NAME: {"BLOCK": 256, "num_warps": 2}}),
        Case("pow2", {"rows": 4, "cols": 512}),
    ),
    device_cases=(Case("8192x16384", {"rows": 8192, "cols": 16384}),),
    bench_cases=(Case("16384x16384", {"rows": 16384, "cols": 16384}),),
    cost=_cost,
    torch_op=torch_op,
    config_space=swiglu.SPACE,
    problem=lambda case, dtype: {"n": case.params["rows"] * case.params["cols"], "dtype": dtype},
    backward=True,
    tolerances={"float32": (1e-5, 1e-5), "float16": (2e-3, 2e-3), "bfloat16": (1.6e-2, 1.6e-2)},
)
