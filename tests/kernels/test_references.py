"""Each operator's PyTorch reference agrees with PyTorch's own op (`torch_op`, the benchmark's baseline).

Validation judges every kernel against the reference, and the benchmark times the
kernel against `torch_op`: if those two disagreed, a kernel could pass validation
and still compute something other than what it is compared with. Small shapes, fp32,
outputs and (for differentiable operators) input gradients.
"""

from __future__ import annotations

import pytest
import torch

from accelport.kernels import OPERATOR_NAMES, get
from accelport.kernels.validate import compare, output_checks, outputs

CASES = [(name, case) for name in OPERATOR_NAMES for case in get(name).cases]


def _call(fn, inputs, grad_idx, grad_seed):
    leaves = [a.detach().clone().requires_grad_(i in grad_idx) if isinstance(a, torch.Tensor) else a for i, a in enumerate(inputs.args)]
    outs = outputs(fn(*leaves, **inputs.kwargs))
    grads = []
    if grad_idx:
        seeds = [torch.randn(o.shape, generator=torch.Generator().manual_seed(grad_seed + i)) for i, o in enumerate(outs)]
        torch.autograd.backward(outs, seeds)
        grads = [leaves[i].grad for i in grad_idx]
    return tuple(o.detach() for o in outs), grads


@pytest.mark.parametrize(("name", "case"), CASES, ids=[f"{n}-{c.label}" for n, c in CASES])
def test_reference_matches_pytorchs_own_op(name, case):
    op = get(name)
    inputs = op.make_inputs(case, torch.float32, "cpu", torch.Generator().manual_seed(11))
    grad_idx = inputs.grad if op.backward else ()
    ref_out, ref_grads = _call(op.reference, inputs, grad_idx, 12)
    torch_out, torch_grads = _call(op.torch_op, inputs, grad_idx, 12)
    assert len(ref_grads) == len(torch_grads)
    assert len(torch_out) == len(ref_out)
    pairs = [*zip(output_checks(len(ref_out)), torch_out, ref_out, strict=True), *zip(map(str, grad_idx), torch_grads, ref_grads, strict=True)]
    for what, got, want in pairs:
        passed, max_abs, worst, detail = compare(got, want, atol=2e-5, rtol=2e-5)
        assert passed, f"{name}/{case.label} {what}: max |err| {max_abs:.3g}, err/tol {worst:.3g}; {detail}"
    if op.torch_inputs is not None:  # the benchmark's prepared inputs compute the same thing
        prepared = op.torch_inputs(inputs)
        with torch.no_grad():
            torch.testing.assert_close(outputs(op.torch_op(*prepared.args, **prepared.kwargs)), ref_out, atol=2e-5, rtol=2e-5)


def test_every_operator_has_a_pytorch_op_and_small_cases():
    assert {name for name, _ in CASES} == set(OPERATOR_NAMES)
    assert all(callable(get(name).torch_op) for name in OPERATOR_NAMES)
