"""tl_compat: the interpreter's bf16 dot is wrong (triton#11584); the compat path is what makes bf16 right."""

from __future__ import annotations

import torch

from accelport.kernels import get, tl_compat
from accelport.kernels.validate import validate

from .mutants import load_copy


def test_raw_tl_dot_gets_bf16_wrong_and_compat_gets_it_right(tmp_path):
    op = get("gemm")
    raw = load_copy("accelport.kernels.gemm", tmp_path, "acc = tl_compat.dot(a, b, acc)", "acc = tl.dot(a, b, acc)")
    case = op.cases[:1]
    bf16_raw = validate(op, fn=raw.gemm, dtypes=("bfloat16",), cases=case)
    fp16_raw = validate(op, fn=raw.gemm, dtypes=("float16",), cases=case)
    bf16_compat = validate(op, dtypes=("bfloat16",), cases=case)
    assert not all(r.passed for r in bf16_raw), "the interpreter's bf16 dot no longer misbehaves: tl_compat.dot may be obsolete"
    assert all(r.passed for r in fp16_raw)
    assert all(r.passed for r in bf16_compat)


def test_launch_records_instead_of_running_when_asked():
    op = get("softmax")
    x = torch.empty((4, 1000), device="meta")
    with tl_compat.recording() as launches:
        op.triton(x)
    assert [launch.name for launch in launches] == ["_softmax_fwd"]
    assert launches[0].grid == (4,)
    assert launches[0].kwargs["BLOCK"] == 1024 and launches[0].kwargs["ONE_TILE"] is True
