"""SwiGLU (forward and backward): y = silu(gate) * up, elementwise, fp32 math.

The feed-forward gate of Llama-style MLPs: `down(swiglu(gate_proj(x), up_proj(x)))`.
The backward recomputes the sigmoid instead of storing it.
"""

from __future__ import annotations

from typing import Any

import torch

from accelport.kernels import _rows, configs
from accelport.kernels.registry import Case, Cost, Inputs, KernelError, Operator
from accelport.kernels.tl_compat import launch, tl, triton

NAME = "swiglu"


def reference(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return (torch.nn.functional.silu(gate.float()) * up.float()).to(gate.dtype)


def torch_op(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.silu(gate) * up


@triton.jit
def _swiglu_fwd(gate_ptr, up_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(gate_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(up_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + offs, (a * tl.sigmoid(a) * b).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _swiglu_bwd(gate_ptr, up_ptr, dy_ptr, dgate_ptr, dup_ptr, n, BLOCK: tl.constexpr):
    # d gate = dy * up * sig(a) * (1 + a * (1 - sig(a))),  d up = dy * silu(a)
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(gate_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(up_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    sig = tl.sigmoid(a)
    tl.store(dgate_ptr + offs, (dy * b * sig * (1.0 + a * (1.0 - sig))).to(dgate_ptr.dtype.element_ty), mask=mask)
    tl.store(dup_ptr + offs, (dy * a * sig).to(dup_ptr.dtype.element_ty), mask=mask)


SPACE = configs.elementwise_space(buffers=5)


def _config(t: torch.Tensor) -> configs.Config:
    return configs.choose(NAME, SPACE, {"n": t.numel(), "dtype": _rows.dtype_name(t.dtype)}, t.device)


class _SwiGLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        if gate.shape != up.shape or gate.dtype != up.dtype:
            raise KernelError(f"swiglu: gate {tuple(gate.shape)} {gate.dtype} and up {tuple(up.shape)} {up.dtype} must match")
        gate, up = gate.contiguous(), up.contiguous()
        y = torch.empty_like(gate)
        cfg = _config(gate)
        launch(_swiglu_fwd, (-(-gate.numel() // cfg["BLOCK"]),), gate, up, y, gate.numel(), **cfg.launch_options())
        ctx.save_for_backward(gate, up)
        return y

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        gate, up = ctx.saved_tensors
        dy = dy.contiguous()
        dgate, dup = torch.empty_like(gate), torch.empty_like(up)
        cfg = _config(gate)
        launch(_swiglu_bwd, (-(-gate.numel() // cfg["BLOCK"]),), gate, up, dy, dgate, dup, gate.numel(), **cfg.launch_options())
        return dgate, dup


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """The Triton implementation, differentiable in gate and up."""
    return _SwiGLU.apply(gate, up)


def make_inputs(case: Case, dtype: torch.dtype, device: Any, generator: torch.Generator) -> Inputs:
    shape = (case.params["rows"], case.params["cols"])
    gate = _rows.randn(shape, dtype, device, generator, scale=3.0)
    up = _rows.randn(shape, dtype, device, generator)
    return Inputs(args=(gate, up), grad=(0, 1))


def _cost(case: Case, dtype: str) -> Cost:
    return _rows.streaming_cost(case, dtype, reads=2, writes=1, flops_per_element=6)


OPERATOR = Operator(
    name=NAME,
    summary="silu(gate) * up, elementwise, fp32 math (fwd+bwd)",
    reference=reference,
    triton=swiglu,
    make_inputs=make_inputs,
    cases=(
        Case("ragged", {"rows": 7, "cols": 300}, config={NAME: {"BLOCK": 256, "num_warps": 2}}),
        Case("pow2", {"rows": 4, "cols": 512}),
    ),
    device_cases=(Case("8192x14336", {"rows": 8192, "cols": 14336}),),
    bench_cases=(Case("16384x14336", {"rows": 16384, "cols": 14336}),),
    cost=_cost,
    torch_op=torch_op,
    config_space=SPACE,
    problem=lambda case, dtype: {"n": case.params["rows"] * case.params["cols"], "dtype": dtype},
    backward=True,
)
