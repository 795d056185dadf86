"""Mutation tests: faults planted in the kernels' real source make validation fail.

Each test imports a copy of an operator module (or of a helper module it uses)
with one line changed, and validates that copy's Triton implementation with the
operator's own matrix. The unchanged copy, loaded the same way, passes, so the
failure comes from the fault and not from the loading.
"""

from __future__ import annotations

import pytest

from accelport.kernels import get
from accelport.kernels.validate import validate

from .mutants import load_copy

# (test id, operator, module to mutate, original text, planted fault, occurrence of the original)
MUTATIONS = [
    ("off-by-one-mask", "softmax", "accelport.kernels.softmax",
     "mask = cols < n_cols\n", "mask = cols < n_cols - 1\n", 0),
    ("off-by-one-mean", "rms_norm", "accelport.kernels.rms_norm",
     "/ n_cols + eps)", "/ (n_cols - 1) + eps)", 0),
    ("wrong-softmax-scale", "flash_attention", "accelport.kernels._attention",
     "1.0 / math.sqrt(dim) if scale is None", "1.0 / dim if scale is None", 0),
    ("softmax-in-base-e", "flash_attention", "accelport.kernels._attention",
     "p = tl.math.exp2(s - shift[:, None])", "p = tl.exp(s - shift[:, None])", 0),
    ("missing-causal-mask", "flash_attention", "accelport.kernels._attention",
     "valid = valid & (rows[:, None] >= keys[None, :])", "valid = valid", 0),
    ("wrong-gqa-head", "flash_attention", "accelport.kernels.flash_attention",
     "kv = h // group", "kv = h % group", 0),
    ("missing-causal-mask", "block_sparse_attention", "accelport.kernels._attention",
     "valid = valid & (rows[:, None] >= keys[None, :])", "valid = valid", 0),
    ("csr-row-off-by-one", "block_sparse_attention", "accelport.kernels.block_sparse_attention",
     "for i in range(first, last):", "for i in range(first, last - 1):", 0),
    ("backward-drops-mean-term", "layer_norm", "accelport.kernels.layer_norm",
     "dx = (dyw - c2 - x_hat * c1)", "dx = (dyw - x_hat * c1)", 0),
    ("cross-entropy-grad-ignores-target", "cross_entropy", "accelport.kernels.cross_entropy",
     "- tl.where(start + cols == target, 1.0, 0.0)", "- tl.where(start + cols == target + 1, 1.0, 0.0)", 0),
    ("gemm-drops-k-tail", "gemm", "accelport.kernels.gemm",
     "for k in range(0, tl.cdiv(K, BLOCK_K)):", "for k in range(0, K // BLOCK_K):", 0),
    ("rope-wrong-half", "rope", "accelport.kernels.rope",
     "x2 = tl.load(x_tile + half", "x2 = tl.load(x_tile + half - 1", 0),
]  # fmt: skip


def _implementation(op_name: str, module_name: str, folder, old: str = "", new: str = "", occurrence: int = 0):
    """The Triton implementation of `op_name` built from a copy of its module, `module_name` mutated."""
    op = get(op_name)
    op_module = f"accelport.kernels.{op_name}"
    mutated = load_copy(module_name, folder, old, new, occurrence)
    if module_name == op_module:
        return getattr(mutated, op.triton.__name__)
    copy = load_copy(op_module, folder)
    setattr(copy, module_name.rsplit(".", 1)[-1], mutated)  # the kernels look the helper up at call time
    return getattr(copy, op.triton.__name__)


@pytest.mark.parametrize(("op_name", "module", "old", "new", "occurrence"), [m[1:] for m in MUTATIONS], ids=[f"{m[1]}:{m[0]}" for m in MUTATIONS])
def test_planted_fault_fails_validation(op_name, module, old, new, occurrence, tmp_path):
    op = get(op_name)
    fn = _implementation(op_name, module, tmp_path, old, new, occurrence)
    results = validate(op, fn=fn, dtypes=("float32",), stop_on_failure=True)
    assert any(not r.passed for r in results), f"planted fault {new!r} went unnoticed"


@pytest.mark.parametrize("op_name", sorted({m[1] for m in MUTATIONS}))
def test_unmutated_copy_passes(op_name, tmp_path):
    """The loader itself changes nothing: an unmutated copy passes the same validation."""
    op = get(op_name)
    fn = _implementation(op_name, f"accelport.kernels.{op_name}", tmp_path)
    results = validate(op, fn=fn, dtypes=("float32",), cases=op.cases[:2])
    assert results and all(r.passed for r in results)
