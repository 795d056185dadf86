"""The fused statistics kernel (verify/stats_kernel.py) under TRITON_INTERPRET=1: the float64 reference matrix,
bit-for-bit repeatability, and the capture's device path using it."""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn

from accelport.kernels.tl_compat import HAVE_TRITON, INTERPRETING
from accelport.verify.numerics import stats_kernel
from accelport.verify.numerics.dump import STATS_KERNEL_VAR, capture

pytestmark = pytest.mark.skipif(
    not (HAVE_TRITON and INTERPRETING), reason="needs Triton's interpreter (TRITON_INTERPRET=1 at import, as tests/conftest.py sets)"
)

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32, torch.int64, torch.uint8, torch.bool]
SHAPES = [(1,), (7,), (16, 16), (3, 5, 17)]  # up to 256 elements; with 4 programs of 16 that is 4 passes each


def values(dtype: torch.dtype, shape: tuple[int, ...], seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    n = math.prod(shape)
    if dtype == torch.bool:
        return torch.rand(n, generator=g).lt(0.3).reshape(shape)
    if not dtype.is_floating_point:
        low = 0 if dtype == torch.uint8 else -50
        return torch.randint(low, 100, (n,), generator=g).to(dtype).reshape(shape)
    x = torch.randn(n, generator=g, dtype=torch.float64) * 3
    if n > 6:  # the special values the statistics must count, not sum
        x[1], x[3], x[4], x[5] = math.nan, math.inf, -math.inf, 0.0
        x[6] = -0.0
    return x.to(dtype).reshape(shape)


def measure(tensors: list[torch.Tensor]) -> list[list[float]]:
    batch = stats_kernel.Batch(torch, torch.device("cpu"), programs=4, block=16, slots=3)  # slots=3: several buffers
    slots = [batch.add(t.reshape(-1).contiguous()) for t in tensors]
    rows = batch.finish()
    assert batch.launches == len(tensors) + math.ceil(len(tensors) / 3)  # one per tensor, one per buffer of slots
    return [rows[s] for s in slots]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_the_kernel_matches_the_float64_reference(dtype):
    tensors = [values(dtype, shape, seed) for seed, shape in enumerate(SHAPES)]
    for tensor, got in zip(tensors, measure(tensors), strict=True):
        want = stats_kernel.reference(tensor)
        lo, hi, total, l2, absolute, inf, nonzero, finite = got
        assert (lo, hi) == (want[0], want[1])  # min and max are exact
        assert (inf, nonzero, finite) == (want[5], want[6], want[7])  # counts are exact
        for g, w in ((total, want[2]), (l2, want[3]), (absolute, want[4])):
            assert g == pytest.approx(w, rel=1e-12, abs=1e-12)


def test_all_special_and_empty_finite_tensors():
    [nothing_finite, zeros] = measure([torch.tensor([math.nan, math.inf, -math.inf]), torch.zeros(5)])
    assert nothing_finite[5:] == [2.0, 0.0, 0.0] and nothing_finite[0] == math.inf and nothing_finite[1] == -math.inf
    assert zeros == [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 5.0]


def test_the_reduction_order_is_fixed_so_the_bits_repeat():
    tensors = [values(torch.float32, (16, 16), seed) for seed in range(4)]
    first, again = measure(tensors), measure(tensors)
    assert json.dumps(first) == json.dumps(again)


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        return torch.relu(self.fc(x)).sum()


def run(folder, monkeypatch, mode: str, on_host: bool):
    monkeypatch.setenv(STATS_KERNEL_VAR, mode)
    monkeypatch.setattr(stats_kernel, "PROGRAMS", 4)  # the interpreter runs each program in Python
    torch.manual_seed(0)
    model = Tiny()
    x = torch.randn(2, 8)
    with capture(folder, stats_on_host=on_host, compiled=False) as cap:
        model(x).backward()
        stats = cap._stats
    records = [json.loads(line) for line in (folder / "manifest.jsonl").read_text().splitlines()]
    return records, stats


def test_the_capture_device_path_uses_the_kernel_and_agrees_with_host_statistics(tmp_path, monkeypatch):
    fused, stats = run(tmp_path / "fused", monkeypatch, "triton", on_host=False)
    [batch] = [b for b in stats._batches.values() if b is not None]
    assert batch.launches > 0
    host, _ = run(tmp_path / "host", monkeypatch, "torch", on_host=True)
    assert len(fused) == len(host)
    compared = 0
    for f, h in zip(fused, host, strict=True):
        assert (f.get("op"), f.get("module")) == (h.get("op"), h.get("module"))
        for fd, hd in zip(f.get("in", []) + f.get("out", []), h.get("in", []) + h.get("out", []), strict=True):
            if hd.get("stats") is None:
                continue
            assert not isinstance(fd["stats"], int)  # every index was resolved at the flush
            for a, b in zip(fd["stats"], hd["stats"], strict=True):
                assert (a is None and b is None) or a == pytest.approx(b, rel=1e-6, abs=1e-7)
            compared += 1
    assert compared > 10


def test_the_torch_path_stays_where_asked(tmp_path, monkeypatch):
    _records, stats = run(tmp_path / "torch", monkeypatch, "torch", on_host=False)
    assert not any(stats._batches.values())
