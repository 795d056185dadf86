"""The dump's statistics of device tensors in one Triton launch per tensor, finished for a whole batch in one more.

`accelport dump` on an accelerator used to measure each tensor with some fifteen small
torch kernels (isfinite, where, amin, amax, sum, two norms, three counts, a stack): on a
lent H200 a TinyLM step at d_model 256 cost 18.6x a plain step, launch-bound. Here:

1. `partial_stats` (one launch per tensor) — a fixed grid of PROGRAMS programs; program p
   reads blocks p, p + PROGRAMS, p + 2*PROGRAMS, ... of BLOCK elements, widens them to
   float64 and reduces them to eight numbers: min and max of the finite elements, their
   sum, sum of squares and sum of |x|, the Inf count, the count of finite non-zeros and
   of finite elements. It writes them to its row of the tensor's slot in a batch buffer.
2. `finish_stats` (one launch per batch) — one program per slot reduces its PROGRAMS
   rows in a fixed order and writes the device vector the capture already used
   (min, max, sum, L2, sum |x|, Inf, non-zero finite, finite), so the host side
   (`dump._finish_device`) is unchanged.

Both stages reduce in an order fixed by the grid, not by scheduling: the same tensor gives
the same bits on every run (no atomics). Validated under TRITON_INTERPRET=1 against a
float64 reference (tests/verify/test_stats_kernel.py); measured by benchmarks/gpu_dump.py.
"""

from __future__ import annotations

import math
from typing import Any

from accelport.kernels.tl_compat import HAVE_TRITON, INTERPRETING, tl, triton

PROGRAMS = 128  # stage-1 programs per tensor: enough to fill a large GPU's SMs for big tensors
BLOCK = 1024  # elements a program reads per step
FIELDS = 8
SLOTS = 1024  # tensors per batch buffer (the capture flushes every 1024 tensors by default)


@triton.jit
def partial_stats(x_ptr, n, out_ptr, PROGRAMS: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offsets = tl.arange(0, BLOCK)
    lo = tl.full([BLOCK], float("inf"), tl.float64)
    hi = tl.full([BLOCK], float("-inf"), tl.float64)
    total = tl.zeros([BLOCK], tl.float64)
    square = tl.zeros([BLOCK], tl.float64)
    absolute = tl.zeros([BLOCK], tl.float64)
    infinite = tl.zeros([BLOCK], tl.float64)
    nonzero = tl.zeros([BLOCK], tl.float64)
    finite = tl.zeros([BLOCK], tl.float64)
    for start in range(pid * BLOCK, n, PROGRAMS * BLOCK):
        index = start + offsets
        inside = index < n
        x = tl.load(x_ptr + index, mask=inside, other=0).to(tl.float64)
        magnitude = tl.abs(x)
        is_inf = inside & (magnitude == float("inf"))
        ok = inside & (x == x) & (magnitude != float("inf"))  # x == x: not NaN
        clean = tl.where(ok, x, 0.0)
        lo = tl.minimum(lo, tl.where(ok, x, float("inf")))
        hi = tl.maximum(hi, tl.where(ok, x, float("-inf")))
        total += clean
        square += clean * clean
        absolute += tl.abs(clean)
        infinite += is_inf.to(tl.float64)
        nonzero += (ok & (clean != 0.0)).to(tl.float64)
        finite += ok.to(tl.float64)
    row = out_ptr + pid * 8
    tl.store(row + 0, tl.min(lo, axis=0))
    tl.store(row + 1, tl.max(hi, axis=0))
    tl.store(row + 2, tl.sum(total, axis=0))
    tl.store(row + 3, tl.sum(square, axis=0))
    tl.store(row + 4, tl.sum(absolute, axis=0))
    tl.store(row + 5, tl.sum(infinite, axis=0))
    tl.store(row + 6, tl.sum(nonzero, axis=0))
    tl.store(row + 7, tl.sum(finite, axis=0))


@triton.jit
def finish_stats(partials_ptr, out_ptr, PROGRAMS: tl.constexpr):
    slot = tl.program_id(0)
    rows = tl.arange(0, PROGRAMS)
    base = partials_ptr + slot * PROGRAMS * 8 + rows * 8
    out = out_ptr + slot * 8
    tl.store(out + 0, tl.min(tl.load(base + 0), axis=0))
    tl.store(out + 1, tl.max(tl.load(base + 1), axis=0))
    tl.store(out + 2, tl.sum(tl.load(base + 2), axis=0))
    tl.store(out + 3, tl.sqrt(tl.sum(tl.load(base + 3), axis=0)))
    tl.store(out + 4, tl.sum(tl.load(base + 4), axis=0))
    tl.store(out + 5, tl.sum(tl.load(base + 5), axis=0))
    tl.store(out + 6, tl.sum(tl.load(base + 6), axis=0))
    tl.store(out + 7, tl.sum(tl.load(base + 7), axis=0))


# Element types the kernel reads directly (it widens them to float64 itself).
def _readable(torch: Any) -> frozenset:
    return frozenset(
        {torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8, torch.uint8, torch.int16,
         torch.int32, torch.int64}
    )  # fmt: skip


def available(device: Any) -> bool:
    """Can the fused kernel measure tensors on this device? (A GPU Triton compiles for; on the CPU only
    under the interpreter, which the tests use.)"""
    if not HAVE_TRITON:
        return False
    kind = getattr(device, "type", str(device))
    if kind == "cpu":
        return INTERPRETING
    return kind in ("cuda", "xpu")  # the backends Triton ships; others keep the torch path


class Batch:
    """Slots of one device's batch buffer: stage 1 fills a slot per tensor, `finish` reduces them all."""

    def __init__(self, torch: Any, device: Any, programs: int | None = None, block: int | None = None, slots: int = SLOTS) -> None:
        self.torch = torch
        self.device = device
        self.programs = programs or PROGRAMS
        self.block = block or BLOCK
        self.launches = 0  # kernel launches so far (stage 1 and 2): what the benchmark reports per tensor
        self.readable = _readable(torch)
        self.buffers: list[Any] = []  # [slots, programs, 8] float64 each
        self.used = 0
        self.slots = slots

    def accepts(self, flat: Any) -> bool:
        return (flat.dtype in self.readable or flat.dtype == self.torch.bool) and flat.is_contiguous()

    def add(self, flat: Any) -> int:
        """Launch stage 1 for a contiguous 1-D tensor; its slot number in this batch."""
        slot = self.used
        chunk, row = divmod(slot, self.slots)
        if chunk == len(self.buffers):
            self.buffers.append(
                self.torch.empty((self.slots, self.programs, FIELDS), dtype=self.torch.float64, device=self.device)
            )
        target = self.buffers[chunk][row]
        x = flat.view(self.torch.uint8) if flat.dtype == self.torch.bool else flat
        partial_stats[(self.programs,)](x, x.numel(), target, PROGRAMS=self.programs, BLOCK=self.block)
        self.launches += 1
        self.used += 1
        return slot

    def finish(self) -> list[list[float]]:
        """Stage 2 over every slot (one launch per buffer), one copy to the host; the eight numbers per slot."""
        rows: list[list[float]] = []
        left = self.used
        for buffer in self.buffers:
            if left <= 0:
                break
            count = min(left, self.slots)
            out = self.torch.empty((count, FIELDS), dtype=self.torch.float64, device=self.device)
            finish_stats[(count,)](buffer, out, PROGRAMS=self.programs)
            self.launches += 1
            rows.extend(out.to("cpu").tolist())
            left -= count
        self.used = 0
        return rows


def reference(values: Any) -> list[float]:
    """The same eight numbers in float64 with torch ops on the CPU (what the tests hold the kernel to)."""
    import torch

    x = values.detach().to("cpu").reshape(-1).to(torch.float64)
    finite = torch.isfinite(x)
    clean = torch.where(finite, x, 0.0)
    count = int(finite.sum())
    return [
        float(x[finite].min()) if count else math.inf,
        float(x[finite].max()) if count else -math.inf,
        float(clean.sum()),
        float(torch.linalg.vector_norm(clean)),
        float(clean.abs().sum()),
        float(torch.isinf(x).sum()),
        float(torch.count_nonzero(clean)),
        float(count),
    ]
