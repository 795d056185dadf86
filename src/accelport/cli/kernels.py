"""`accelport kernels list|test|bench|tune|aot|hardware`: the portable Triton operator library (route B).

list      operators: forward and backward implementation per vendor, test matrix
plan      the planning sweep: a config for every operator x hardware profile x Llama-class shape
test      validate every implementation against its PyTorch reference (on CPU: Triton interpreter), and lint
bench     achieved TFLOP/s or GB/s and fraction of peak, beside PyTorch's op in the same run
tune      time the configuration generator's candidates; write the winners as a tuned table
aot       compile every kernel launch for sm_80, sm_90, gfx942 without a GPU; check shared memory fits
hardware  the hardware profiles behind the config generator and the peak figures
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from accelport.cli._output import Style, emit, positive_int, use_color
from accelport.errors import UserError
from accelport.report.table import text_table

ORDER = 60
DTYPES = ("float32", "float16", "bfloat16")


def _device(args: argparse.Namespace) -> str:
    """--device, or the accelerator torch sees, or cpu."""
    import torch

    if args.device != "auto":
        return args.device
    accelerator = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
    return str(accelerator.type) if accelerator is not None else "cpu"


def _prepare(device: str) -> None:
    """Make Triton usable for `device` in this process: the interpreter for CPU tensors."""
    from accelport.kernels import registry

    if device.split(":")[0] == "cpu":
        registry.use_interpreter()


def _json(data: Any, args: argparse.Namespace) -> None:
    emit(json.dumps(data, indent=2) + "\n", args.output)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


# --------------------------------------------------------------------------- list


def run_list(args: argparse.Namespace) -> int:
    from accelport.kernels import registry

    ops = registry.operators()
    vendors = registry.TRITON_VENDORS
    rows = []
    data = []
    for op in ops:
        status = {v: op.vendor_status(v) for v in vendors}
        data.append({
            "name": op.name, "summary": op.summary, "implementations": list(op.implementations),
            "backward": op.backward, "dtypes": list(op.dtypes), "config_axes": sorted(op.config_space.axes),
            "cases": [c.label for c in op.cases], "device_cases": [c.label for c in op.device_cases],
            "bench_cases": [c.label for c in op.bench_cases],
            "vendors": {v: {"forward": f, "backward": b} for v, (f, b) in status.items()},
        })  # fmt: skip
        rows.append((op.name, *(f"{f} / {b}" for f, b in status.values()), len(op.cases), op.summary))
    if args.format == "json":
        _json(data, args)
    else:
        text = text_table(["operator", *vendors, "cases", "what"], rows)
        text += (
            f"{len(ops)} operators; each vendor cell: forward / backward implementation "
            "(triton: generic Triton kernel, triton-<vendor>: an override, recompute: PyTorch recomputes, none: forward only)\n"
        )
        emit(text, args.output)
    return 0


# --------------------------------------------------------------------------- test


def run_test(args: argparse.Namespace) -> int:
    device = _device(args)
    from accelport.kernels import bench, validate

    bench.check_device(device)
    _prepare(device)

    report = validate.run(args.ops or None, device, args.dtype, args.impl, lint=not args.no_lint)
    if args.format == "json":
        _json(report.to_dict(), args)
        return 0 if report.passed else 1
    style = Style(use_color() and not args.output)
    rows = [
        (r.op, r.implementation, r.case, r.dtype, r.check, style.green("ok") if r.passed else style.red("FAIL"),
         f"{r.max_abs_err:.2e}", f"{r.worst_ratio:.3f}", r.detail)
        for r in report.results
    ]  # fmt: skip
    mode = "Triton interpreter on CPU" if report.interpreter else f"native on {report.device}"
    lines = [text_table(["operator", "impl", "case", "dtype", "check", "", "max |err|", "err/tol", "detail"], rows).rstrip("\n")]
    lines.extend(str(f) for f in report.lint)
    failed = sum(not r.passed for r in report.results)
    lines.append(f"{len(report.results)} checks ({mode}): {len(report.results) - failed} passed, {failed} failed; {len(report.lint)} lint findings")
    emit("\n".join(lines) + "\n", args.output, styled=True)
    return 0 if report.passed else 1


# --------------------------------------------------------------------------- bench


def run_bench(args: argparse.Namespace) -> int:
    device = _device(args)
    from accelport.kernels import bench, registry

    bench.check_device(device)
    results = bench.run(registry.operators(args.ops or None), device, args.dtype, args.cases)
    targets = bench.check_targets(results) if args.check_targets else []
    missed = any(t.passed is False for t in targets)
    if args.format == "json":
        data: dict[str, Any] = {"device": device, "results": [r.to_dict() for r in results]}
        if args.check_targets:
            data["targets"] = [t.to_dict() for t in targets]
        _json(data, args)
        return 1 if missed else 0
    rows = [
        (r.op, r.case, r.dtype, r.implementation, f"{r.ms:.4f}", f"{r.achieved:.4g} {r.unit}", _pct(r.fraction),
         f"{r.torch_ms:.4f}", f"{r.torch_achieved:.4g} {r.unit}", _pct(r.torch_fraction), f"{r.speedup:.2f}x")
        for r in results
    ]  # fmt: skip
    headers = ["operator", "case", "dtype", "impl", "ms", "achieved", "of peak", "torch ms", "torch", "torch of peak", "vs torch"]
    notes = sorted({r.note for r in results if r.note})
    text = text_table(headers, rows) + "".join(f"note: {n}\n" for n in notes)
    for t in targets:
        verdict = "not measurable here" if t.passed is None else ("met" if t.passed else "MISSED")
        shown = "-" if t.value is None else f"{t.value:.3f} ({t.case})"
        why = f" ({t.detail})" if t.detail else ""
        text += f"target {t.op} {t.measure} >= {t.threshold}: {shown} {verdict}{why}\n"
    emit(text, args.output)
    return 1 if missed else 0


# --------------------------------------------------------------------------- tune


def run_tune(args: argparse.Namespace) -> int:
    device = _device(args)
    _prepare(device)
    from accelport.kernels import bench, configs, registry, tune

    bench.check_device(device)
    ops = registry.operators(args.ops or None)
    if device.split(":")[0] == "cpu":
        for op in ops:
            registry.check_runnable(op.name, registry.TRITON, "cpu")
    if args.max_configs < 1:
        raise UserError(f"--max-configs {args.max_configs}: must be at least 1")
    table = Path(args.table or f"tuned-{configs.device_key(device)}.json")
    # The table is written after each operator, so a run cut short keeps what it finished.
    trials, entries = tune.tune(ops, device, args.dtype, args.cases, args.max_configs, table=table)
    data = {"device": device, "table": str(table), "entries": [e.to_dict() for e in entries], "trials": [t.to_dict() for t in trials]}
    if args.format == "json":
        _json(data, args)
    else:
        rows = [(t.op, t.case, t.dtype, t.bucket, t.config, "-" if t.ms is None else f"{t.ms:.4f}", t.error[:60]) for t in trials]
        text = text_table(["operator", "case", "dtype", "bucket", "config", "ms", "error"], rows)
        text += f"{len(entries)} tuned entries written to {table}; use them with ACCELPORT_KERNEL_TUNED={table}\n"
        if device.split(":")[0] == "cpu":
            text += "note: timed under the Triton interpreter on CPU: the table exercises tuning, not GPU speed\n"
        emit(text, args.output)
    return 0 if entries else 1


# --------------------------------------------------------------------------- aot


def run_aot(args: argparse.Namespace) -> int:
    from accelport.kernels import aot, registry

    names = [op.name for op in registry.operators(args.ops or None)]
    results = aot.run(names, args.target or aot.TARGETS, args.dtype, args.jobs)
    passed = bool(results) and all(r.passed for r in results)
    if args.format == "json":
        _json({"passed": passed, "results": [r.to_dict() for r in results]}, args)
        return 0 if passed else 1
    style = Style(use_color() and not args.output)
    rows = [
        (r.op, r.kernel, r.target, r.dtype, r.config, "-" if r.shared_bytes is None else r.shared_bytes, r.limit_bytes,
         r.matrix_instructions, f"{r.seconds:.2f}", style.green("ok") if r.passed else style.red("FAIL"), r.error[:80])
        for r in results
    ]  # fmt: skip
    text = text_table(["operator", "kernel", "target", "dtype", "config", "shared B", "limit B", "mma", "s", "", "error"], rows)
    failed = sum(not r.passed for r in results)
    text += f"{len(results)} builds: {len(results) - failed} fit, {failed} failed\n"
    emit(text, args.output, styled=True)
    return 0 if passed else 1


# --------------------------------------------------------------------------- plan


def run_plan(args: argparse.Namespace) -> int:
    from accelport.kernels import planning

    rows = list(planning.sweep(dtypes=args.dtype or planning.DTYPES))
    missing = planning.unplanned(rows)
    refused = [r for r in rows if r.refusal]
    if args.format == "json":
        _json({"triples": len(rows), "unplanned": [r.to_dict() for r in missing], "refused": [r.to_dict() for r in refused]}, args)
        return 1 if missing else 0
    shown = [r for r in rows if not r.planned] if not args.all else rows
    table = text_table(
        ["space", "profile", "problem", "config", "why not"],
        [(r.space, r.profile, r.label, r.config or "-", r.refusal or ", ".join(f"{k} ({n})" for k, n in r.rejected.items()) if not r.planned else "") for r in shown],
    ) if shown else ""  # fmt: skip
    profiles = sorted({r.profile for r in rows})
    text = table + (
        f"{len(rows)} (config space, profile, shape, dtype) triples over {len(profiles)} profiles "
        f"({', '.join(profiles)}): {len(rows) - len(missing) - len(refused)} planned, "
        f"{len(refused)} refused with a documented limit, {len(missing)} unplanned\n"
    )
    emit(text, args.output)
    return 1 if missing else 0


# --------------------------------------------------------------------------- hardware


def run_hardware(args: argparse.Namespace) -> int:
    from accelport.kernels import hardware

    profiles = [hardware.profile(args.key)] if args.key else list(hardware.profiles().values())
    if args.format == "json":
        _json([p.to_dict() for p in profiles], args)
        return 0
    rows = [
        (p.key, p.name, p.vendor, p.arch, f"{p.cores} {p.core_unit}", p.warp_size, f"{p.onchip_bytes_per_block // 1024} KiB {p.onchip_kind}",
         p.peak("bfloat16") or "-", p.bandwidth_gbs or "-")
        for p in profiles
    ]  # fmt: skip
    emit(text_table(["key", "name", "vendor", "arch", "cores", "warp", "on chip / block", "bf16 TFLOP/s", "GB/s"], rows), args.output)
    return 0


def _common(parser: argparse.ArgumentParser, ops: bool = True, device: bool = True, dtype: bool = True) -> None:
    if ops:
        parser.add_argument("ops", nargs="*", metavar="OP", help="operator names (default: all); see `accelport kernels list`")
    if device:
        parser.add_argument("--device", default="auto", help="torch device (default: the accelerator torch sees, else cpu)")
    if dtype:
        parser.add_argument("--dtype", action="append", choices=DTYPES, help="only this dtype; repeatable (default: each op's dtypes)")
    parser.add_argument("--format", choices=("table", "json"), default="table")
    parser.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "kernels", help="portable Triton operators: list, validate, benchmark, tune, AOT-compile",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    sub = parser.add_subparsers(dest="kernels_command", metavar="SUBCOMMAND", required=True)

    p = sub.add_parser("list", help="operators, implementations, matrices, config axes")
    _common(p, ops=False, device=False, dtype=False)
    p.set_defaults(handler=run_list)

    p = sub.add_parser("test", help="validate implementations against the references; lint the kernels")
    _common(p)
    p.add_argument("--impl", action="append", metavar="NAME", help="only this implementation (triton, triton-npu, ...); repeatable")
    p.add_argument("--no-lint", action="store_true", help="skip the kernel lint")
    p.set_defaults(handler=run_test)

    p = sub.add_parser("bench", help="TFLOP/s or GB/s, fraction of peak, beside PyTorch's op")
    _common(p)
    p.add_argument("--cases", choices=("small", "device", "bench"), help="which matrix (default: bench; small on CPU)")
    p.add_argument("--check-targets", action="store_true", help="judge against the GPU targets (exit 1 if one is missed)")
    p.set_defaults(handler=run_bench)

    p = sub.add_parser("tune", help="time the generator's candidates; write a tuned table")
    _common(p)
    p.add_argument("--cases", choices=("small", "device", "bench"), help="which matrix (default: bench; small on CPU)")
    p.add_argument("--max-configs", type=int, default=8, metavar="N", help="time at most N candidates per case (default: %(default)s)")
    p.add_argument(
        "--table", metavar="FILE",
        help="tuned table to write or merge into, after each operator; missing folders are created (default: tuned-<device>.json)",
    )  # fmt: skip
    p.set_defaults(handler=run_tune)

    p = sub.add_parser("aot", help="compile every launch for GPU targets without a GPU; check shared memory")
    _common(p, device=False)
    p.add_argument("--target", action="append", choices=("sm_80", "sm_90", "gfx942"), help="compile target; repeatable (default: all three)")
    p.add_argument("--jobs", type=positive_int, metavar="N", help="compiler processes (default: CPU count)")
    p.set_defaults(handler=run_aot)

    p = sub.add_parser("plan", help="does every operator get a config on every hardware profile at Llama-class sizes?")
    _common(p, ops=False, device=False)
    p.add_argument("--all", action="store_true", help="show every triple, not only the unplanned ones")
    p.set_defaults(handler=run_plan)

    p = sub.add_parser("hardware", help="hardware profiles: on-chip memory, cores, matrix units, peaks")
    p.add_argument("key", nargs="?", help="one profile key (default: all)")
    _common(p, ops=False, device=False, dtype=False)
    p.set_defaults(handler=run_hardware)
