"""Op-local replay: re-run one recorded op on the CPU to tell an op bug from accumulated drift.

The op, with REF's arguments, is run in float64 on REF's inputs and on TEST's inputs:
each side's recorded output is then measured against the exact result for its own
inputs, so what the inputs brought in (drift) drops out. TEST's error is allowed k
times the larger of REF's error and the error a correct CPU kernel makes in TEST's
own dtypes (the op run on the CPU on TEST's inputs in their recorded dtypes): a
bf16 matmul may be off by bf16 rounding, a bf16 ReLU may not be off at all. Above
that, the op itself computes wrongly on TEST. When the two sides called the op with
different arguments (a LayerNorm eps), TEST is measured against REF's call.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from accelport.verify.numerics.metrics import TensorFiles

# Random ops cannot be replayed: their output is not a function of their inputs.
_RANDOM = (
    "bernoulli",
    "dropout",
    "rand",
    "normal",
    "uniform",
    "multinomial",
    "randperm",
    "exponential",
    "geometric",
    "cauchy",
)


def _resolve(name: str) -> Any:
    import torch

    parts = name.split(".")
    if len(parts) < 2 or parts[0] != "aten":
        return None
    packet = getattr(torch.ops.aten, parts[1], None)
    if packet is None:
        return None
    return getattr(packet, parts[2] if len(parts) > 2 else "default", None)


def _inputs(record: Mapping[str, Any], files: TensorFiles, exact: bool) -> list[Any] | None:
    """The op's input tensors: widened to float64 (exact) or in their recorded dtypes."""
    import torch

    tensors = []
    for entry in record.get("in", []):
        if "file" not in entry:
            return None
        tensor = torch.from_numpy(files.load(entry).copy())
        dtype = getattr(torch, entry["dtype"])
        if tensor.is_floating_point() and exact:
            tensor = tensor.double()
        else:
            tensor = tensor.to(dtype)
        tensors.append(tensor)
    return tensors


def _rebuild(spec: Any, tensors: list[Any], exact: bool) -> Any:
    import torch

    if isinstance(spec, list):
        return [_rebuild(v, tensors, exact) for v in spec]
    if isinstance(spec, dict):
        if "t" in spec and len(spec) == 1:
            return tensors[spec["t"]]
        if "float" in spec:
            return float(spec["float"])
        if "torch" in spec:
            value = getattr(torch, spec["torch"].split(".")[-1], None)
            if exact and isinstance(value, torch.dtype) and value.is_floating_point:
                return torch.float64
            return value
        if "device" in spec:
            return torch.device("cpu")
        raise ValueError(f"argument {spec} cannot be rebuilt")
    return spec


def _run(op: Any, args: Mapping[str, Any], tensors: list[Any], exact: bool) -> list[Any]:
    import torch

    positional = _rebuild(args.get("a", []), tensors, exact)
    named = {k: _rebuild(v, tensors, exact) for k, v in args.get("kw", {}).items()}
    with torch.no_grad():
        result = op(*positional, **named)
    if isinstance(result, torch.Tensor):
        return [result]
    return (
        [r for r in result if isinstance(r, torch.Tensor)]
        if isinstance(result, list | tuple)
        else []
    )


def _rel_error(recorded: Any, exact: Any) -> float:
    import numpy as np

    exact = exact.detach().double().numpy().reshape(-1)
    recorded = np.asarray(recorded, dtype=np.float64).reshape(-1)
    finite = np.isfinite(exact) & np.isfinite(recorded)
    exact, recorded = exact[finite], recorded[finite]
    norm = float(np.linalg.norm(exact))
    diff = float(np.linalg.norm(recorded - exact))
    return diff / norm if norm > 0 else diff


def replay(
    ref: Mapping[str, Any],
    test: Mapping[str, Any],
    ref_files: TensorFiles,
    test_files: TensorFiles,
    ratio: float,
) -> dict[str, Any]:
    """Replay the op of a matched pair; returns what was found, or why it could not be replayed."""
    name = ref.get("op", "")
    if ref.get("k") != "op" or ref.get("fused_from") or test.get("fused_from"):
        return {"status": "not replayable", "why": "not a single ATen op"}
    if any(word in name for word in _RANDOM):
        return {"status": "not replayable", "why": "random op"}
    try:
        import torch  # noqa: F401
    except ImportError:
        return {"status": "not replayable", "why": "torch is not installed"}
    op = _resolve(name)
    if op is None:
        return {"status": "not replayable", "why": f"{name} is not an ATen op this torch knows"}
    ref_in, test_in = _inputs(ref, ref_files, True), _inputs(test, test_files, True)
    test_native = _inputs(test, test_files, False)
    if (
        ref_in is None
        or test_in is None
        or test_native is None
        or not all("file" in o for o in ref.get("out", []) + test.get("out", []))
    ):
        return {
            "status": "not replayable",
            "why": "needs full tensors of inputs and outputs (dump with --tensors)",
        }
    args = ref.get("args") or {}
    try:
        exact_ref = _run(op, args, ref_in, True)
        exact_test = _run(op, args, test_in, True)
        cpu_test = _run(op, args, test_native, False)
    except (RuntimeError, TypeError, ValueError, IndexError, NotImplementedError) as exc:
        return {
            "status": "not replayable",
            "why": f"CPU run failed: {str(exc).splitlines()[0][:200]}",
        }
    outputs = []
    verdict = "drift"
    for index, (out_r, out_t) in enumerate(
        zip(ref.get("out", []), test.get("out", []), strict=False)
    ):
        if (
            index >= min(len(exact_ref), len(exact_test), len(cpu_test))
            or not exact_ref[index].is_floating_point()
        ):
            continue
        err_ref = _rel_error(ref_files.load(out_r), exact_ref[index])
        err_test = _rel_error(test_files.load(out_t), exact_test[index])
        err_cpu = _rel_error(cpu_test[index].double().numpy(), exact_test[index])
        drift = _rel_error(exact_test[index].numpy(), exact_ref[index])
        # A floor of a few float64 roundings, so two exact results do not make a zero allowance.
        allowed = ratio * max(err_ref, err_cpu, 2.0**-50)
        op_bug = err_test > allowed
        if op_bug:
            verdict = "op"
        outputs.append(
            {
                "output": index,
                "ref_error_vs_float64": err_ref,
                "test_error_vs_float64": err_test,
                "cpu_same_dtype_error_vs_float64": err_cpu,
                "allowed_test_error": allowed,
                "input_drift_effect": drift,
                "op_error_exceeds": op_bug,
            }
        )
    if not outputs:
        return {"status": "not replayable", "why": "no floating-point output to check"}
    worst = max(
        outputs, key=lambda o: o["test_error_vs_float64"] / max(o["allowed_test_error"], 1e-300)
    )
    score = worst["test_error_vs_float64"] / max(worst["allowed_test_error"], 1e-300)
    args_note = (
        " (TEST called it with different arguments)" if ref.get("args") != test.get("args") else ""
    )
    return {
        "status": "done",
        "verdict": verdict,
        "ratio_k": ratio,
        "score": score,
        "summary": (
            f"TEST's {name} is off by {worst['test_error_vs_float64']:.3g} against float64 "
            f"(REF's: {worst['ref_error_vs_float64']:.3g}, a correct CPU kernel in TEST's dtype: "
            f"{worst['cpu_same_dtype_error_vs_float64']:.3g}; allowed {worst['allowed_test_error']:.3g}): "
            + (
                "the op itself is wrong on TEST" + args_note
                if verdict == "op"
                else "accumulated drift, not this op"
            )
        ),
        "outputs": [
            {
                k: (v if not isinstance(v, float) or math.isfinite(v) else repr(v))
                for k, v in o.items()
            }
            for o in outputs
        ],
    }
