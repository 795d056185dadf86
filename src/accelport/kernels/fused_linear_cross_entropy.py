"""Fused linear + cross-entropy (forward and backward) that never materialises the full (tokens, vocabulary) logits.

loss = cross_entropy(x @ weight^T, target) for x (N, hidden) and weight (vocab, hidden),
as a language model's head and loss. The rows are taken `chunk_rows` at a time: the
GEMM kernel writes one chunk of logits, the cross-entropy kernels turn it into loss
and, in place, into d logits, and two more GEMMs fold it into d x and d weight.
Peak extra memory is one chunk of logits instead of all of them (a 128k vocabulary
at 8k tokens is 2 GiB in bf16). As in Liger-Kernel's fused linear cross-entropy, the
gradients are computed in the forward, so backward only scales them by the incoming
gradient: reductions `mean` and `sum` (`none` would need a per-row scale; it is refused).
"""

from __future__ import annotations

from typing import Any

import torch

from accelport.kernels import _rows, gemm
from accelport.kernels import cross_entropy as ce
from accelport.kernels.registry import Case, Cost, Inputs, KernelError, Operator

NAME = "fused_linear_cross_entropy"
CHUNK_ELEMENTS = 1 << 26  # logits per chunk: 64 Mi elements (128 MiB in bf16), whatever the vocabulary


def reference(
    x: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, ignore_index: int = -100, reduction: str = "mean",
    chunk_rows: int | None = None,
) -> torch.Tensor:  # fmt: skip
    logits = torch.nn.functional.linear(x.float(), weight.float())
    return torch.nn.functional.cross_entropy(logits, target, ignore_index=ignore_index, reduction=reduction).to(x.dtype)


def torch_op(
    x: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, ignore_index: int = -100, reduction: str = "mean",
    chunk_rows: int | None = None,
) -> torch.Tensor:  # fmt: skip
    logits = torch.nn.functional.linear(x, weight)
    return torch.nn.functional.cross_entropy(logits, target, ignore_index=ignore_index, reduction=reduction)


def _chunk(n_rows: int, vocab: int, chunk_rows: int | None) -> int:
    return max(1, min(n_rows, chunk_rows or CHUNK_ELEMENTS // max(vocab, 1)))


class FusedLinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, ignore_index: int, reduction: str,
        chunk_rows: int | None,
    ) -> torch.Tensor:  # fmt: skip
        if reduction not in ("mean", "sum"):
            raise KernelError(f"{NAME}: reduction {reduction!r} is not supported; use mean or sum (or cross_entropy for none)")
        if x.dim() != 2 or weight.dim() != 2 or x.shape[1] != weight.shape[1] or target.shape != x.shape[:1]:
            raise KernelError(
                f"{NAME}: x must be (N, hidden), weight (vocab, hidden), target (N,); got {tuple(x.shape)}, "
                f"{tuple(weight.shape)}, {tuple(target.shape)}"
            )
        n_rows, vocab = x.shape[0], weight.shape[0]
        target = target.contiguous()
        ce.check_targets(target, vocab, ignore_index)
        valid = (target != ignore_index).sum()
        scale = (1.0 / valid.clamp_min(1).float() if reduction == "mean" else torch.ones((), device=x.device)).reshape(1)
        total = torch.zeros((), dtype=torch.float32, device=x.device)
        dx = torch.empty_like(x) if ctx.needs_input_grad[0] else None
        dw = torch.zeros(weight.shape, dtype=torch.float32, device=x.device) if ctx.needs_input_grad[1] else None
        step = _chunk(n_rows, vocab, chunk_rows)
        for start in range(0, n_rows, step):
            xc, tc = x[start : start + step], target[start : start + step]
            logits = gemm.matmul(xc, weight.t())  # one chunk of logits, in x's dtype
            loss, lse = ce.launch_forward(logits, tc, ignore_index, ce.Options())
            total += loss.sum()
            if dx is None and dw is None:
                continue
            # d logits = (softmax - one_hot) * scale, written over the logits (each element read, then written, by one program)
            ce.launch_backward(logits, tc, lse, scale, None, logits, ignore_index, ce.Options())
            if dx is not None:
                dx[start : start + step] = gemm.matmul(logits, weight)
            if dw is not None:
                dw += gemm.matmul(logits.t(), xc).float()
        ctx.save_for_backward(dx if dx is not None else x.new_empty(0), dw if dw is not None else x.new_empty(0))
        ctx.weight_dtype = weight.dtype
        return (total * scale[0] if reduction == "mean" else total).to(x.dtype)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        dx, dw = ctx.saved_tensors
        g = grad.float()
        out_dx = (dx.float() * g).to(dx.dtype) if ctx.needs_input_grad[0] else None
        out_dw = (dw * g).to(ctx.weight_dtype) if ctx.needs_input_grad[1] else None
        return out_dx, out_dw, None, None, None, None


def fused_linear_cross_entropy(
    x: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, ignore_index: int = -100, reduction: str = "mean",
    chunk_rows: int | None = None,
) -> torch.Tensor:  # fmt: skip
    """The Triton implementation, differentiable in x and weight."""
    return FusedLinearCrossEntropy.apply(x, weight, target, ignore_index, reduction, chunk_rows)


def make_inputs(case: Case, dtype: torch.dtype, device: Any, generator: torch.Generator) -> Inputs:
    p = case.params
    x = _rows.randn((p["rows"], p["hidden"]), dtype, device, generator)
    weight = _rows.randn((p["vocab"], p["hidden"]), dtype, device, generator, scale=0.3)
    if torch.device(device).type == "meta":
        target = torch.empty(p["rows"], dtype=torch.int64, device="meta")
    else:
        target = torch.randint(0, p["vocab"], (p["rows"],), generator=generator)
        target[:: p.get("ignore_every", p["rows"] + 1)] = -100
        target = target.to(device)
    kwargs = {"reduction": p.get("reduction", "mean"), "chunk_rows": p.get("chunk_rows")}
    return Inputs(args=(x, weight, target), kwargs=kwargs, grad=(0, 1))


def _problem(case: Case, dtype: str) -> dict[str, Any]:
    p = case.params
    return {"M": _chunk(p["rows"], p["vocab"], p.get("chunk_rows")), "N": p["vocab"], "K": p["hidden"], "dtype": dtype}


def _cost(case: Case, dtype: str) -> Cost:
    p = case.params
    flops = 6.0 * p["rows"] * p["vocab"] * p["hidden"]  # the logits GEMM and the two gradient GEMMs
    return Cost(flops=flops, bytes=(p["rows"] + p["vocab"]) * p["hidden"] * 2 * _rows.DTYPE_BYTES[dtype], bound="compute")


OPERATOR = Operator(
    name=NAME,
    summary="x @ W^T then cross-entropy in row chunks, no full logits; mean/sum (fwd+bwd)",
    reference=reference,
    triton=fused_linear_cross_entropy,
    make_inputs=make_inputs,
    cases=(
        Case("chunked-ignore", {"rows": 10, "hidden": 32, "vocab": 100, "chunk_rows": 4, "ignore_every": 3}),
        Case("sum-one-chunk", {"rows": 6, "hidden": 48, "vocab": 64, "reduction": "sum"}),
    ),
    device_cases=(Case("4096x4096x32000", {"rows": 4096, "hidden": 4096, "vocab": 32000}),),
    bench_cases=(Case("8192x8192x128256", {"rows": 8192, "hidden": 8192, "vocab": 128256}),),
    cost=_cost,
    torch_op=torch_op,
    config_space=gemm.SPACE,
    problem=_problem,
    backward=True,
    tolerances={"float32": (1e-5, 1e-5), "float16": (4e-3, 4e-3), "bfloat16": (3e-2, 3e-2)},
)
