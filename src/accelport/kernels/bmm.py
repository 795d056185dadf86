"""Batched GEMM (forward and backward): C[i] = A[i] @ B[i], the GEMM kernel with the batch on the grid's second axis.

What attention without a fused kernel (q k^T, p v) and `torch.bmm` callers run. A and B
may be any strided views (a transposed batch costs no copy). The backward is the
same kernel on transposed views: dA = dC @ B^T, dB = A^T @ dC.
"""

from __future__ import annotations

from typing import Any

import torch

from accelport.kernels import _rows, gemm
from accelport.kernels.registry import Case, Cost, Inputs, Operator

NAME = "bmm"


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.bmm(a.float(), b.float()).to(a.dtype)


def torch_op(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.bmm(a, b)


class BatchedMatmul(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(a, b)
        return gemm.batched_matmul(a, b)

    @staticmethod
    def backward(ctx: Any, dc: torch.Tensor) -> tuple[Any, ...]:
        a, b = ctx.saved_tensors
        da = gemm.batched_matmul(dc, b.transpose(1, 2)) if ctx.needs_input_grad[0] else None
        db = gemm.batched_matmul(a.transpose(1, 2), dc) if ctx.needs_input_grad[1] else None
        return da, db


def bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The Triton implementation, differentiable in a and b."""
    return BatchedMatmul.apply(a, b)


def make_inputs(case: Case, dtype: torch.dtype, device: Any, generator: torch.Generator) -> Inputs:
    p = case.params
    a = _rows.randn((p["batch"], p["M"], p["K"]), dtype, device, generator)
    if p.get("b_transposed"):  # (B, N, K) storage used as (B, K, N), as k^T in attention
        b = _rows.randn((p["batch"], p["N"], p["K"]), dtype, device, generator).transpose(1, 2)
    else:
        b = _rows.randn((p["batch"], p["K"], p["N"]), dtype, device, generator)
    return Inputs(args=(a, b), grad=(0, 1))


def _problem(case: Case, dtype: str) -> dict[str, Any]:
    p = case.params
    return {"M": p["M"], "N": p["N"], "K": p["K"], "dtype": dtype}


def _cost(case: Case, dtype: str) -> Cost:
    p = case.params
    b, m, n, k = p["batch"], p["M"], p["N"], p["K"]
    return Cost(flops=2.0 * b * m * n * k, bytes=b * (m * k + k * n + m * n) * _rows.DTYPE_BYTES[dtype], bound="compute")


OPERATOR = Operator(
    name=NAME,
    summary="batched C[i] = A[i] @ B[i], one launch, strided operands (fwd+bwd)",
    reference=reference,
    triton=bmm,
    make_inputs=make_inputs,
    cases=(
        Case("ragged-transposed", {"batch": 3, "M": 40, "N": 24, "K": 36, "b_transposed": True}),
        Case("pow2", {"batch": 2, "M": 64, "N": 64, "K": 32}),
    ),
    device_cases=(Case("32x2048x2048x128", {"batch": 32, "M": 2048, "N": 2048, "K": 128}),),
    bench_cases=(Case("64x4096x4096x128", {"batch": 64, "M": 4096, "N": 4096, "K": 128}),),
    cost=_cost,
    torch_op=torch_op,
    config_space=gemm.SPACE,
    problem=_problem,
    backward=True,
)
