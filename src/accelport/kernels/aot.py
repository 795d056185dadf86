"""Ahead-of-time compile check: every kernel launch a target would make compiles for it and fits its on-chip memory.

No GPU is needed. For each operator, target (sm_80, sm_90, gfx942) and dtype, the
Triton implementation runs forward and backward on `meta` tensors at the device
and benchmark sizes while launches are recorded (`tl_compat.recording`); configs
are chosen as on the target's reference device (`configs.targeting`), so tuned
tables and the generator's defaults are what gets built. Each distinct launch is
compiled with `triton.compile(..., target=GPUTarget(...))`, and its shared memory
(`metadata.shared`) is compared with the target's per-block limit.

Compiling needs Triton in compiled mode, which a process running the interpreter
cannot switch to (see `tl_compat`), so the work runs in child processes started
without TRITON_INTERPRET; several run at once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

TARGETS: tuple[str, ...] = ("sm_80", "sm_90", "gfx942")

_TRITON_TYPES = {
    "float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float64": "fp64",
    "int64": "i64", "int32": "i32", "int16": "i16", "int8": "i8", "uint8": "u8", "bool": "i1",
}  # fmt: skip


@dataclass(frozen=True)
class CompileResult:
    """One distinct kernel launch compiled for one target."""

    op: str
    kernel: str
    target: str
    dtype: str
    config: str
    cases: tuple[str, ...]
    shared_bytes: int | None
    limit_bytes: int
    seconds: float
    matrix_instructions: str  # wgmma, mma, mfma or "-" (no tensor-core instruction in the code)
    error: str = ""

    @property
    def passed(self) -> bool:
        return not self.error and self.shared_bytes is not None and self.shared_bytes <= self.limit_bytes

    def to_dict(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "kernel": self.kernel,
            "target": self.target,
            "dtype": self.dtype,
            "config": self.config,
            "cases": list(self.cases),
            "shared_bytes": self.shared_bytes,
            "limit_bytes": self.limit_bytes,
            "fits": self.passed,
            "seconds": round(self.seconds, 3),
            "matrix_instructions": self.matrix_instructions,
            "error": self.error,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CompileResult:
        return cls(
            data["op"], data["kernel"], data["target"], data["dtype"], data["config"], tuple(data["cases"]),
            data["shared_bytes"], data["limit_bytes"], data["seconds"], data["matrix_instructions"], data["error"],
        )  # fmt: skip


@dataclass
class _Spec:
    kernel: Any
    signature: dict[str, str]
    constexprs: dict[str, Any]
    attrs: dict[tuple[int, ...], list]
    options: dict[str, int]
    cases: list[str] = field(default_factory=list)

    def key(self) -> str:
        """What makes two launches one build: kernel, types, constants, hints and options.

        Divisibility hints stay in: they decide whether loads are aligned enough to be
        pipelined through shared memory (a GEMM with K=1000 keeps one buffer where
        K=4096 keeps one per stage), so they change the very figure this check tests.
        """
        return json.dumps(
            [self.kernel.__name__, self.signature, {k: repr(v) for k, v in self.constexprs.items()},
             {str(k): v for k, v in self.attrs.items()}, self.options],
            sort_keys=True,
        )  # fmt: skip

    def config_label(self) -> str:
        shown = {k: v for k, v in self.constexprs.items() if k.isupper()}
        return " ".join([*(f"{k}={v}" for k, v in sorted(shown.items())), f"w{self.options['num_warps']}", f"s{self.options['num_stages']}"])


def spec_of(launch: Any) -> _Spec:
    """The compile signature of a recorded launch, specialised the way Triton's JIT specialises it."""
    import torch

    fn = launch.kernel
    options = {"num_warps": launch.kwargs.get("num_warps", 4), "num_stages": launch.kwargs.get("num_stages", 3)}
    bound = dict(zip(fn.arg_names, launch.args, strict=False))
    bound.update({k: v for k, v in launch.kwargs.items() if k not in ("num_warps", "num_stages")})
    signature: dict[str, str] = {}
    constexprs: dict[str, Any] = {}
    attrs: dict[tuple[int, ...], list] = {}
    for index, param in enumerate(fn.params):
        name = param.name
        value = bound.get(name, param.default)
        if param.is_constexpr or value is None:
            signature[name], constexprs[name] = "constexpr", value
        elif isinstance(value, torch.Tensor):
            signature[name] = "*" + _TRITON_TYPES[str(value.dtype).removeprefix("torch.")]
            if value.data_ptr() % 16 == 0:
                attrs[(index,)] = [["tt.divisibility", 16]]
        elif isinstance(value, bool):
            signature[name] = "i1"
        elif isinstance(value, int):
            if value == 1:  # the JIT turns an int equal to 1 into a constant
                signature[name], constexprs[name] = "constexpr", 1
                continue
            signature[name] = "i32" if -(2**31) <= value < 2**31 else "i64"
            if value % 16 == 0:
                attrs[(index,)] = [["tt.divisibility", 16]]
        elif isinstance(value, float):
            signature[name] = "fp32"
        else:
            raise TypeError(f"{fn.__name__}: cannot type argument {name}={value!r} for an AOT build")
    return _Spec(fn, signature, constexprs, attrs, options)


def record_launches(op: Any, target: str, dtype: str, cases: Sequence[str] | None = None) -> list[_Spec]:
    """Run `op`'s Triton implementation on meta tensors as on `target`; the distinct launches it makes.

    The cases are the device and benchmark matrices (or those of them named in `cases`).
    """
    import torch

    from accelport.kernels import configs, hardware, tl_compat, validate

    specs: dict[str, _Spec] = {}
    with configs.targeting(hardware.for_target(target)):
        for case in (*op.device_cases, *op.bench_cases):
            if cases is not None and case.label not in cases:
                continue
            inputs = op.make_inputs(case, getattr(torch, dtype), "meta", None)
            with tl_compat.recording() as launches:
                leaves = [
                    a.detach().requires_grad_(i in inputs.grad and op.backward) if isinstance(a, torch.Tensor) else a
                    for i, a in enumerate(inputs.args)
                ]
                outs = validate.outputs(op.triton(*leaves, **inputs.kwargs))
                if op.backward and inputs.grad:
                    torch.autograd.backward(outs, [torch.empty_like(o) for o in outs])
            for launch in launches:
                spec = spec_of(launch)
                spec = specs.setdefault(spec.key(), spec)
                if case.label not in spec.cases:
                    spec.cases.append(case.label)
    return list(specs.values())


def _matrix_instructions(kernel: Any) -> str:
    asm = kernel.asm
    text = str(asm.get("ptx", "")) + str(asm.get("amdgcn", ""))
    for needle, label in (("wgmma", "wgmma"), ("mma.sync", "mma"), ("v_mfma", "mfma")):
        if needle in text:
            return label
    return "-"


def compile_spec(spec: _Spec, target: str) -> tuple[int | None, float, str, str]:
    """Compile one launch for `target`: (shared bytes, seconds, matrix instructions, error)."""
    import triton

    from accelport.kernels import hardware

    hw = hardware.for_target(target)
    assert hw.triton_target is not None
    gpu_target = hw.triton_target.gpu_target()
    started = time.perf_counter()
    try:
        source = triton.compiler.ASTSource(fn=spec.kernel, signature=spec.signature, constexprs=spec.constexprs, attrs=spec.attrs)
        backend = triton.compiler.make_backend(gpu_target)
        options = backend.parse_options(dict(spec.options))
        kernel = triton.compile(source, target=gpu_target, options=options.__dict__)
    except Exception as exc:  # a compile error is the finding; keep its first line
        message = str(exc).strip().splitlines()
        return None, time.perf_counter() - started, "-", f"{type(exc).__name__}: {message[-1] if message else ''}"
    return int(kernel.metadata.shared), time.perf_counter() - started, _matrix_instructions(kernel), ""


Job = tuple[str, str, str, tuple[str, ...] | None]  # operator, target, dtype, case labels (None: all)


def check_in_process(jobs: Iterable[Job]) -> list[CompileResult]:
    """Compile the launches of (op, target, dtype, cases) jobs here; this process must not be interpreting."""
    from accelport.kernels import hardware, registry, tl_compat

    if tl_compat.INTERPRETING:
        raise registry.KernelError("the AOT check cannot run in a process that imported triton with TRITON_INTERPRET=1")
    results = []
    for op_name, target, dtype, cases in jobs:
        op = registry.get(op_name)
        limit = hardware.for_target(target).onchip_bytes_per_block
        try:
            specs = record_launches(op, target, dtype, cases)
        except Exception as exc:  # the host code could not plan a launch (no config fits, a shape error)
            message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            results.append(CompileResult(op.name, "(host code)", target, dtype, "-", (), None, limit, 0.0, "-", f"{type(exc).__name__}: {message}"))
            continue
        for spec in specs:
            shared, seconds, instructions, error = compile_spec(spec, target)
            results.append(
                CompileResult(op.name, spec.kernel.__name__, target, dtype, spec.config_label(), tuple(spec.cases),
                              shared, limit, seconds, instructions, error)
            )  # fmt: skip
    return results


def plan(ops: Sequence[str], targets: Sequence[str], dtypes: Sequence[str] | None, cases: Sequence[str] | None = None) -> list[Job]:
    """The jobs of an AOT check: every operator x target x dtype (of the operator's dtypes)."""
    from accelport.kernels import registry

    jobs: list[Job] = []
    for op in registry.operators(ops):
        for target in targets:
            for dtype in op.dtypes:
                if dtypes is None or dtype in dtypes:
                    jobs.append((op.name, target, dtype, tuple(cases) if cases else None))
    return jobs


class Check:
    """AOT compile jobs running in child processes; `results()` waits for them."""

    def __init__(self, jobs: Sequence[Job], workers: int | None = None, env: dict[str, str] | None = None) -> None:
        workers = max(1, min(workers or os.cpu_count() or 1, len(jobs) or 1))
        env = {**{k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}, **(env or {})}
        self._results: list[CompileResult] | None = None
        self._procs = []
        for shard in (jobs[i::workers] for i in range(workers)):
            if not shard:
                continue
            # Files, not pipes: a worker that fills a pipe nobody reads yet would stall.
            stdout, stderr = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")  # noqa: SIM115 (closed in close())
            proc = subprocess.Popen(
                [sys.executable, "-m", "accelport.kernels.aot"],
                stdin=subprocess.PIPE, stdout=stdout, stderr=stderr, text=True, env=env,
            )  # fmt: skip
            assert proc.stdin is not None
            proc.stdin.write(json.dumps(list(shard)))
            proc.stdin.close()
            self._procs.append((proc, stdout, stderr))

    def close(self) -> None:
        """Stop workers that are still running (results not collected are lost)."""
        for proc, stdout, stderr in self._procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            stdout.close()
            stderr.close()

    def results(self) -> list[CompileResult]:
        """Wait for the workers and return every build, sorted; the same list on every call."""
        if self._results is not None:
            return self._results
        from accelport.kernels import registry

        results: list[CompileResult] = []
        for proc, stdout, stderr in self._procs:
            proc.wait()
            stdout.seek(0)
            stderr.seek(0)
            out, err = stdout.read(), stderr.read()
            if proc.returncode != 0:
                tail = err.strip().splitlines()[-1] if err.strip() else f"exit code {proc.returncode}"
                raise registry.KernelError(f"AOT compile worker failed: {tail}")
            results.extend(CompileResult.from_dict(json.loads(line)) for line in out.splitlines() if line.strip())
        self._results = sorted(results, key=lambda r: (r.op, r.target, r.dtype, r.kernel, r.config))
        return self._results


def run(ops: Sequence[str], targets: Sequence[str] = TARGETS, dtypes: Sequence[str] | None = None, workers: int | None = None) -> list[CompileResult]:
    """Compile every launch of `ops` for `targets` (in child processes) and check it fits on chip."""
    check = Check(plan(ops, targets, dtypes), workers)
    try:
        return check.results()
    finally:
        check.close()


def _worker() -> int:
    jobs = [(op, target, dtype, tuple(cases) if cases else None) for op, target, dtype, cases in json.loads(sys.stdin.read())]
    for result in check_in_process(jobs):
        print(json.dumps(result.to_dict()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_worker())
