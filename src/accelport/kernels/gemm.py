"""GEMM: C = A @ B with fp16/bf16 (or fp32) inputs and fp32 accumulation, output in the input dtype.

Tiles of BLOCK_M x BLOCK_N per program, stepping K by BLOCK_K with software
pipelining (num_stages); programs are ordered in groups of GROUP_M rows of tiles
so neighbouring programs share A and B tiles in L2. A and B may be any strided
views (a transposed weight costs no copy); A may have leading batch dimensions,
as in a linear layer. The backward is the same kernel on transposed views:
dA = dC @ B^T, dB = A^T @ dC.
"""

from __future__ import annotations

from typing import Any

import torch

from accelport.kernels import _rows, configs, tl_compat
from accelport.kernels.registry import Case, Cost, Inputs, KernelError, Operator
from accelport.kernels.tl_compat import launch, tl, triton

NAME = "gemm"


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.matmul(a.float(), b.float()).to(a.dtype)


def torch_op(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.matmul(a, b)


@triton.jit
def _gemm_kernel(
    a_ptr, b_ptr, c_ptr, bias_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    stride_ab, stride_bb, stride_cb,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    HAS_BIAS: tl.constexpr = False,
):  # fmt: skip
    pid = tl.program_id(0)
    batch = tl.program_id(1).to(tl.int64)  # bmm: one grid row per batch entry; 0 strides otherwise
    a_ptr += batch * stride_ab
    b_ptr += batch * stride_bb
    c_ptr += batch * stride_cb
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    # Grouped order: GROUP_M rows of tiles walk N together, so their A tiles stay in L2.
    in_group = GROUP_M * tiles_n
    first_m = (pid // in_group) * GROUP_M
    group_m = tl.minimum(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % in_group) % group_m
    pid_n = (pid % in_group) // group_m
    # Rows and columns past the edge wrap around (loads stay in bounds, no mask); the store masks them.
    rm = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    rn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    rm = tl.max_contiguous(tl.multiple_of(rm, BLOCK_M), BLOCK_M)
    rn = tl.max_contiguous(tl.multiple_of(rn, BLOCK_N), BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a_tile = a_ptr + rm.to(tl.int64)[:, None] * stride_am + rk[None, :] * stride_ak
    b_tile = b_ptr + rk[:, None] * stride_bk + rn.to(tl.int64)[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_tile, mask=rk[None, :] < k_left, other=0.0)
        b = tl.load(b_tile, mask=rk[:, None] < k_left, other=0.0)
        acc = tl_compat.dot(a, b, acc)
        a_tile += BLOCK_K * stride_ak
        b_tile += BLOCK_K * stride_bk
    cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if HAS_BIAS:  # a linear layer's bias, added in fp32 before the one rounding to the output dtype
        acc += tl.load(bias_ptr + cn, mask=cn < N, other=0.0).to(tl.float32)[None, :]
    c_tile = c_ptr + cm.to(tl.int64)[:, None] * stride_cm + cn[None, :] * stride_cn
    tl.store(c_tile, acc.to(c_ptr.dtype.element_ty), mask=(cm[:, None] < M) & (cn[None, :] < N))


_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


def _smem(c: configs.Config, p: configs.Problem, hw: Any) -> int:
    # Pipelined A and B tiles, or the output tile when the epilogue converts layouts.
    elt = _BYTES[p["dtype"]]
    operands = configs.pipeline_buffers(c.num_stages, hw) * (c["BLOCK_M"] + c["BLOCK_N"]) * c["BLOCK_K"] * elt
    return max(operands, c["BLOCK_M"] * c["BLOCK_N"] * elt)


def _reject(c: configs.Config, p: configs.Problem, hw: Any) -> str | None:
    unit = hw.matrix_unit(p["dtype"])
    if unit is not None and c["BLOCK_K"] < unit[2]:
        return "BLOCK_K below the matrix unit's K"
    if c["BLOCK_M"] > max(configs.pow2_at_least(p["M"]), 32) or c["BLOCK_N"] > max(configs.pow2_at_least(p["N"]), 32):
        return "tile larger than the problem"
    if c["BLOCK_K"] > max(configs.pow2_at_least(p["K"]), 32):
        return "BLOCK_K larger than K"
    if hw.warp_size and c["BLOCK_M"] * c["BLOCK_N"] // (c.num_warps * hw.warp_size) > 128:
        return "accumulator over 128 fp32 registers per thread"
    if hw.warp_size and c["BLOCK_M"] * c["BLOCK_N"] // (c.num_warps * hw.warp_size) < 8:
        return "fewer than 8 accumulators per thread"
    return None


def _score(c: configs.Config, p: configs.Problem, hw: Any) -> float:
    tiles = -(-p["M"] // c["BLOCK_M"]) * -(-p["N"] // c["BLOCK_N"])
    cores = max(hw.cores, 1)
    waves = tiles / cores
    occupancy = min(1.0, waves) * (waves / -(-tiles // cores) if waves >= 1 else 1.0)  # wave quantisation
    reuse = c["BLOCK_M"] * c["BLOCK_N"] / (c["BLOCK_M"] + c["BLOCK_N"])  # FLOPs per byte loaded, per tile
    stages = 2 if hw.warp_size == 64 else 3  # AMD's stream pipeliner wants 2; NVIDIA's cp.async/TMA 3-4
    k_steps = abs(c["BLOCK_K"].bit_length() - 7)  # BLOCK_K 64: long enough MMA chains, few loop trips
    return -occupancy * reuse + abs(c.num_stages - stages) * 2 + k_steps + (c.num_warps != 8) * 0.5


SPACE = configs.ConfigSpace(
    axes={
        "BLOCK_M": lambda p, hw: (32, 64, 128, 256),
        "BLOCK_N": lambda p, hw: (32, 64, 128, 256),
        "BLOCK_K": lambda p, hw: (16, 32, 64, 128),
        "GROUP_M": lambda p, hw: (8,),
    },
    onchip_bytes=_smem,
    bucket=lambda p: configs.bucket_pow2(M=p["M"], N=p["N"], K=p["K"]),
    score=_score,
    num_warps=configs.matrix_warps,
    # Ascend (a grid bound to cores) has no num_stages: its compiler pipelines the cube unit's buffers itself.
    num_stages=lambda p, hw: (1,) if hw.grid_is_physical else (1, 2) if hw.warp_size == 64 else (2, 3, 4, 5),
    reject=_reject,
)


def matmul(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """a (..., K) @ b (K, N) [+ bias (N,)] -> (..., N) with the Triton kernel (no autograd)."""
    if b.dim() != 2 or a.shape[-1] != b.shape[0]:
        raise KernelError(f"gemm: cannot multiply {tuple(a.shape)} by {tuple(b.shape)}; b must be (K, N) with K = a.shape[-1]")
    if a.dtype != b.dtype:
        raise KernelError(f"gemm: a is {a.dtype} and b is {b.dtype}; cast one of them")
    if bias is not None and tuple(bias.shape) != (b.shape[1],):
        raise KernelError(f"gemm: bias of shape {tuple(bias.shape)} does not fit {b.shape[1]} output columns")
    lead = a.shape[:-1]
    a2 = _rows.flat(a)
    (m, k), n = a2.shape, b.shape[1]
    c = torch.empty((m, n), dtype=a.dtype, device=a.device)
    if m and n:
        if k == 0:
            c.zero_()
            return (c if bias is None else c + bias.to(c.dtype)).view(*lead, n)
        problem = {"M": m, "N": n, "K": k, "dtype": _rows.dtype_name(a.dtype)}
        cfg = configs.choose(NAME, SPACE, problem, a.device)
        grid = (-(-m // cfg["BLOCK_M"]) * -(-n // cfg["BLOCK_N"]), 1)
        launch(
            _gemm_kernel, grid, a2, b, c, c if bias is None else bias, m, n, k, a2.stride(0), a2.stride(1),
            b.stride(0), b.stride(1), c.stride(0), c.stride(1), 0, 0, 0, HAS_BIAS=bias is not None, **cfg.launch_options(),
        )  # fmt: skip
    return c.view(*lead, n)


def batched_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a (B, M, K) @ b (B, K, N) -> (B, M, N) with one launch: the grid's second axis walks the batch (no autograd)."""
    if a.dim() != 3 or b.dim() != 3 or a.shape[0] != b.shape[0] or a.shape[2] != b.shape[1]:
        raise KernelError(f"bmm: cannot multiply {tuple(a.shape)} by {tuple(b.shape)}; expected (B, M, K) and (B, K, N)")
    if a.dtype != b.dtype:
        raise KernelError(f"bmm: a is {a.dtype} and b is {b.dtype}; cast one of them")
    batch, m, k = a.shape
    n = b.shape[2]
    c = torch.empty((batch, m, n), dtype=a.dtype, device=a.device)
    if not (batch and m and n):
        return c
    if k == 0:
        return c.zero_()
    # One config for every batch entry: the problem of one (M, N, K) product.
    cfg = configs.choose(NAME, SPACE, {"M": m, "N": n, "K": k, "dtype": _rows.dtype_name(a.dtype)}, a.device)
    grid = (-(-m // cfg["BLOCK_M"]) * -(-n // cfg["BLOCK_N"]), batch)
    launch(
        _gemm_kernel, grid, a, b, c, c, m, n, k, a.stride(1), a.stride(2), b.stride(1), b.stride(2), c.stride(1),
        c.stride(2), a.stride(0), b.stride(0), c.stride(0), HAS_BIAS=False, **cfg.launch_options(),
    )  # fmt: skip
    return c


class _Gemm(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(a, b)
        return matmul(a, b)

    @staticmethod
    def backward(ctx: Any, dc: torch.Tensor) -> tuple[Any, ...]:
        a, b = ctx.saved_tensors
        da = matmul(dc, b.t()) if ctx.needs_input_grad[0] else None
        db = None
        if ctx.needs_input_grad[1]:
            db = matmul(_rows.flat(a).t(), _rows.flat(dc))
        return da, db


def gemm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The Triton implementation, differentiable in a and b (the backward reuses the kernel)."""
    return _Gemm.apply(a, b)


def make_inputs(case: Case, dtype: torch.dtype, device: Any, generator: torch.Generator) -> Inputs:
    p = case.params
    a = _rows.randn((*p.get("batch", ()), p["M"], p["K"]), dtype, device, generator)
    if p.get("b_transposed"):  # a (N, K) weight used as its transpose, as nn.Linear does
        b = _rows.randn((p["N"], p["K"]), dtype, device, generator).t()
    else:
        b = _rows.randn((p["K"], p["N"]), dtype, device, generator)
    return Inputs(args=(a, b), grad=(0, 1))


def _problem(case: Case, dtype: str) -> dict[str, Any]:
    p = case.params
    rows = p["M"]
    for size in p.get("batch", ()):
        rows *= size
    return {"M": rows, "N": p["N"], "K": p["K"], "dtype": dtype}


def _cost(case: Case, dtype: str) -> Cost:
    p = _problem(case, dtype)
    m, n, k = p["M"], p["N"], p["K"]
    return Cost(flops=2.0 * m * n * k, bytes=(m * k + k * n + m * n) * _BYTES[dtype], bound="compute")


OPERATOR = Operator(
    name=NAME,
    summary="C = A @ B, fp16/bf16 (or fp32) in, fp32 accumulate, strided operands (fwd+bwd)",
    reference=reference,
    triton=gemm,
    make_inputs=make_inputs,
    cases=(
        Case(
            "ragged-grouped",
            {"M": 96, "N": 80, "K": 72},
            config={NAME: {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 2, "num_warps": 4, "num_stages": 2}},
        ),
        Case("pow2", {"M": 128, "N": 128, "K": 128}),
        Case("batched-linear", {"batch": (2,), "M": 24, "N": 40, "K": 64, "b_transposed": True}),
    ),
    device_cases=(Case("1000x1000x1000", {"M": 1000, "N": 1000, "K": 1000}), Case("4096x4096x4096", {"M": 4096, "N": 4096, "K": 4096})),
    bench_cases=(Case("8192x8192x8192", {"M": 8192, "N": 8192, "K": 8192}), Case("4096x14336x4096", {"M": 4096, "N": 14336, "K": 4096})),
    cost=_cost,
    torch_op=torch_op,
    config_space=SPACE,
    problem=_problem,
    backward=True,
)
