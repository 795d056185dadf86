"""Every operator, every implementation, against its PyTorch reference under the Triton interpreter."""

from __future__ import annotations

import pytest
import torch

from accelport.kernels import OPERATOR_NAMES, get, tl_compat
from accelport.kernels.validate import compare, output_checks, outputs, validate


def test_tests_run_under_the_interpreter():
    assert tl_compat.INTERPRETING, "TRITON_INTERPRET=1 was not in effect when triton was imported"


@pytest.mark.parametrize("name", OPERATOR_NAMES)
def test_operator_matches_reference(name):
    op = get(name)
    results = validate(op)
    failed = [f"{r.implementation}/{r.case}/{r.dtype}/{r.check}: {r.detail}" for r in results if not r.passed]
    assert not failed, failed
    # The matrix covered what it claims: every Triton implementation (vendor overrides included),
    # fp32, fp16 and bf16 (bf16 through tl_compat), every case, outputs and, for training ops, gradients.
    assert {r.implementation for r in results} == set(op.implementations) - {"reference"}
    assert {r.dtype for r in results} == {"float32", "float16", "bfloat16"}
    assert {r.case for r in results} == {c.label for c in op.cases}
    first = op.make_inputs(op.cases[0], torch.float32, "cpu", torch.Generator())
    expected_checks = set(output_checks(len(outputs(op.reference(*first.args, **first.kwargs)))))
    if op.backward:
        grad_args = op.make_inputs(op.cases[0], torch.float32, "cpu", torch.Generator()).grad
        expected_checks |= {f"grad:{i}" for i in grad_args}
    assert {r.check for r in results} == expected_checks


def test_compare_holds_each_element_to_its_tolerance():
    ref = torch.tensor([1.0, 100.0, 0.0])
    assert compare(ref.clone(), ref, 1e-5, 1e-5)[0]
    assert not compare(ref + torch.tensor([0.0, 0.0, 0.01]), ref, 1e-5, 1e-5)[0]  # atol scales with max |ref|: 1e-3
    assert compare(ref + torch.tensor([0.0, 0.0, 0.0005]), ref, 1e-5, 1e-5)[0]
    passed, _, _, detail = compare(torch.tensor([1.0, float("nan"), 0.0]), ref, 1e-2, 1e-2)
    assert not passed and "non-finite" in detail
    passed, _, _, detail = compare(ref[:2], ref, 1e-2, 1e-2)
    assert not passed and "shape" in detail


def test_an_unwritten_output_element_cannot_pass_by_luck():
    """Allocations are NaN-filled while an implementation runs: a kernel that skips an element fails."""
    op = get("swiglu")

    def forgets_the_last_element(gate, up):
        out = torch.empty_like(gate)
        flat = out.view(-1)
        flat[:-1] = (torch.nn.functional.silu(gate.float()) * up.float()).view(-1)[:-1].to(gate.dtype)
        return out

    results = validate(op, fn=forgets_the_last_element, dtypes=("float32",), cases=op.cases[:1])
    assert not results[0].passed and "non-finite" in results[0].detail
