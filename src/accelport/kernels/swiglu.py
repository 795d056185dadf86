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


SILU, GELU_TANH = 0, 1  # the gate activations of the GLU kernels: SwiGLU (Llama), GEGLU with tanh GELU (Gemma)


@triton.jit
def _activation(a, ACT: tl.constexpr):
    """(act(a), act'(a)) in fp32; tanh is built from the sigmoid (libdevice returns None under the interpreter)."""
    if ACT == 0:
        sig = tl.sigmoid(a)
        return a * sig, sig * (1.0 + a * (1.0 - sig))
    else:
        k = 0.7978845608028654  # sqrt(2 / pi)
        z = tl.minimum(tl.maximum(2.0 * k * (a + 0.044715 * a * a * a), -40.0), 40.0)  # tanh is +-1 in fp32 beyond
        t = 2.0 * tl.sigmoid(z) - 1.0
        return 0.5 * a * (1.0 + t), 0.5 * (1.0 + t) + 0.5 * a * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * a * a)


@triton.jit
def _glu_fwd(gate_ptr, up_ptr, y_ptr, n, ACT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(gate_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(up_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    act, _ = _activation(a, ACT)
    tl.store(y_ptr + offs, (act * b).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _glu_bwd(gate_ptr, up_ptr, dy_ptr, dgate_ptr, dup_ptr, n, ACT: tl.constexpr, BLOCK: tl.constexpr):
    # d gate = dy * up * act'(a),  d up = dy * act(a); the activation is recomputed, not stored
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(gate_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(up_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    act, grad = _activation(a, ACT)
    tl.store(dgate_ptr + offs, (dy * b * grad).to(dgate_ptr.dtype.element_ty), mask=mask)
    tl.store(dup_ptr + offs, (dy * act).to(dup_ptr.dtype.element_ty), mask=mask)


SPACE = configs.elementwise_space(buffers=5)
_NAMES = {SILU: NAME, GELU_TANH: "geglu"}  # config space name of each activation's launches


def _config(t: torch.Tensor, act: int) -> configs.Config:
    return configs.choose(_NAMES[act], SPACE, {"n": t.numel(), "dtype": _rows.dtype_name(t.dtype)}, t.device)


class GLU(torch.autograd.Function):
    """act(gate) * up and its backward, for one of the activations above."""

    @staticmethod
    def forward(ctx: Any, gate: torch.Tensor, up: torch.Tensor, act: int) -> torch.Tensor:
        if gate.shape != up.shape or gate.dtype != up.dtype:
            raise KernelError(f"{_NAMES[act]}: gate {tuple(gate.shape)} {gate.dtype} and up {tuple(up.shape)} {up.dtype} must match")
        gate, up = gate.contiguous(), up.contiguous()
        y = torch.empty_like(gate)
        if gate.numel():
            cfg = _config(gate, act)
            launch(_glu_fwd, (-(-gate.numel() // cfg["BLOCK"]),), gate, up, y, gate.numel(), ACT=act, **cfg.launch_options())
        ctx.save_for_backward(gate, up)
        ctx.act = act
        return y

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[Any, ...]:
        gate, up = ctx.saved_tensors
        dy = dy.contiguous()
        dgate, dup = torch.empty_like(gate), torch.empty_like(up)
        if gate.numel():
            cfg = _config(gate, ctx.act)
            launch(
                _glu_bwd, (-(-gate.numel() // cfg["BLOCK"]),), gate, up, dy, dgate, dup, gate.numel(), ACT=ctx.act,
                **cfg.launch_options(),
            )  # fmt: skip
        return dgate, dup, None


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """The Triton implementation, differentiable in gate and up."""
    return GLU.apply(gate, up, SILU)


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
