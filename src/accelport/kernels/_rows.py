"""Shared host-side plumbing of the row-wise operators (softmax, norms, cross-entropy): shapes, problems, costs."""

from __future__ import annotations

from typing import Any

from accelport.kernels.registry import Case, Cost

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}

# Hidden sizes of Llama-class models (4096, 5120, 8192) at training batch sizes, shared by the norms.
NORM_DEVICE_CASES = (Case("4096x4096", {"rows": 4096, "cols": 4096}), Case("2048x5120", {"rows": 2048, "cols": 5120}))
NORM_BENCH_CASES = (Case("16384x4096", {"rows": 16384, "cols": 4096}), Case("8192x8192", {"rows": 8192, "cols": 8192}))


def as_rows(x: Any) -> Any:
    """View `x` as (rows, last dim) with a contiguous last dimension (copying only if it is strided)."""
    if x.stride(-1) != 1:
        x = x.contiguous()
    return flat(x)


def flat(x: Any) -> Any:
    """`x` as (rows, last dim), strides kept where a view allows; not reshape(-1, cols), which fails with no columns."""
    rows = 1
    for size in x.shape[:-1]:
        rows *= size
    return x.reshape(rows, x.shape[-1])


def check_weight(op: str, x: Any, *params: Any) -> None:
    """A norm's weight or bias must be None or a vector as wide as x's last dimension (KernelError otherwise)."""
    from accelport.kernels.registry import KernelError

    for p in params:
        if p is not None and (p.dim() != 1 or p.shape[0] != x.shape[-1]):
            raise KernelError(f"{op}: weight/bias of shape {tuple(p.shape)} does not fit x of shape {tuple(x.shape)}; expected ({x.shape[-1]},) or None")


def dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def problem(case: Case, dtype: str) -> dict[str, Any]:
    return {"rows": case.params["rows"], "cols": case.params["cols"], "dtype": dtype}


def problem_of(x2d: Any) -> dict[str, Any]:
    return {"rows": int(x2d.shape[0]), "cols": int(x2d.shape[1]), "dtype": dtype_name(x2d.dtype)}


def streaming_cost(case: Case, dtype: str, reads: float, writes: float, flops_per_element: float) -> Cost:
    """A memory-bound row op: `reads` and `writes` row-sized tensors, a few FLOPs per element."""
    elements = case.params["rows"] * case.params["cols"]
    return Cost(flops=flops_per_element * elements, bytes=(reads + writes) * elements * DTYPE_BYTES[dtype], bound="memory")


def randn(shape: tuple[int, ...], dtype: Any, device: Any, generator: Any, scale: float = 1.0) -> Any:
    """Seeded normal values, drawn on the CPU in fp32 then moved and rounded; on `meta` only a shape."""
    import torch

    if torch.device(device).type == "meta":
        return torch.empty(shape, dtype=dtype, device="meta")
    x = torch.randn(shape, generator=generator, dtype=torch.float32) * scale
    return x.to(device=device, dtype=dtype)


def random_rows(case: Case, dtype: Any, device: Any, generator: Any, scale: float = 1.0) -> Any:
    return randn((case.params["rows"], case.params["cols"]), dtype, device, generator, scale)


def row_programs(n_rows: int, device: Any, config: Any, max_programs: int | None = None) -> tuple[int, int]:
    """(programs, rows per program) for a backward that sums parameter gradients per program.

    A few programs per core keep every core busy while the host-side sum of the
    partial rows stays small; a config may pin `PROGRAMS` (tests use it to make
    programs loop over several rows).
    """
    from accelport.kernels import configs

    programs = config.get("PROGRAMS") or 4 * max(configs.profile_for(device).cores, 1)
    programs = max(1, min(programs, n_rows, max_programs or n_rows))
    per_program = max(1, -(-n_rows // programs))  # an empty batch: one program with no rows writes zero partials
    return max(1, -(-n_rows // per_program)), per_program
