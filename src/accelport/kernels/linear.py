"""Linear layer (forward and backward): y = x @ weight^T + bias, the GEMM kernel with the bias in its epilogue.

x is (..., in), weight (out, in) as nn.Linear stores it (used as a transposed view,
no copy), bias (out,) or None. The bias is added to the fp32 accumulator before the
single rounding to the output dtype. The backward runs the GEMM kernel twice
(dx = dy @ weight, d weight = dy^T @ x); d bias is a column sum in fp32.
"""

from __future__ import annotations

from typing import Any

import torch

from accelport.kernels import _rows, gemm
from accelport.kernels.registry import Case, Cost, Inputs, KernelError, Operator

NAME = "linear"


def reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    return torch.nn.functional.linear(x.float(), weight.float(), None if bias is None else bias.float()).to(x.dtype)


def torch_op(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    return torch.nn.functional.linear(x, weight, bias)


class Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        if weight.dim() != 2:
            raise KernelError(f"{NAME}: weight must be (out, in), got {tuple(weight.shape)}")
        ctx.save_for_backward(x, weight)
        ctx.bias_dtype = None if bias is None else bias.dtype
        return gemm.matmul(x, weight.t(), bias)

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[Any, ...]:
        x, weight = ctx.saved_tensors
        dy2 = _rows.flat(dy)
        dx = gemm.matmul(dy, weight) if ctx.needs_input_grad[0] else None
        dw = gemm.matmul(dy2.t(), _rows.flat(x)) if ctx.needs_input_grad[1] else None
        db = dy2.float().sum(0).to(ctx.bias_dtype) if ctx.bias_dtype is not None and ctx.needs_input_grad[2] else None
        return dx, dw, db


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """The Triton implementation, differentiable in x, weight and bias."""
    return Linear.apply(x, weight, bias)


def make_inputs(case: Case, dtype: torch.dtype, device: Any, generator: torch.Generator) -> Inputs:
    p = case.params
    x = _rows.randn((*p.get("batch", ()), p["M"], p["K"]), dtype, device, generator)
    weight = _rows.randn((p["N"], p["K"]), dtype, device, generator, scale=0.2)
    if not p.get("bias", True):
        return Inputs(args=(x, weight), grad=(0, 1))
    return Inputs(args=(x, weight, _rows.randn((p["N"],), dtype, device, generator)), grad=(0, 1, 2))


def _cost(case: Case, dtype: str) -> Cost:
    p = gemm._problem(case, dtype)  # (batch..., M) rows, N out, K in: the same sizes as a GEMM case
    m, n, k = p["M"], p["N"], p["K"]
    return Cost(flops=2.0 * m * n * k, bytes=(m * k + k * n + m * n + n) * _rows.DTYPE_BYTES[dtype], bound="compute")


OPERATOR = Operator(
    name=NAME,
    summary="x @ weight^T + bias, the GEMM kernel with a bias epilogue (fwd+bwd)",
    reference=reference,
    triton=linear,
    make_inputs=make_inputs,
    cases=(
        Case("batched-bias-ragged", {"batch": (2,), "M": 24, "N": 56, "K": 40}),
        Case("no-bias", {"M": 64, "N": 32, "K": 64, "bias": False}),
    ),
    device_cases=(Case("llama-up-4096x11008x4096", {"M": 4096, "N": 11008, "K": 4096}),),
    bench_cases=(Case("llama-up-8192x28672x8192", {"M": 8192, "N": 28672, "K": 8192}),),
    cost=_cost,
    torch_op=torch_op,
    config_space=gemm.SPACE,
    problem=gemm._problem,
    backward=True,
)
