"""`accelport kernels test` for every operator at once, one process per operator, merged into one report.

On a GPU with a cold Triton cache, validation is mostly compiling: every distinct launch
(kernel, dtypes, constants, warps, stages) compiles once, in the process that launches
it, on one core. One process per operator spreads that over `--jobs` cores, which is
how `gpu_kernels.sh` keeps validation within its time limit from a cold cache. Writes
the JSON `kernels test --format json` writes (checks, failures, lint, results), plus
the wall time and exit code of each operator's process.

    python benchmarks/kernels_validate_parallel.py [OP ...] --device cuda [--dtype D] [--jobs N] -o test.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def _one(op: str, device: str, dtypes: list[str], folder: Path) -> tuple[str, int, float, dict | None, str]:
    out = folder / f"{op}.json"
    command = [sys.executable, "-m", "accelport", "kernels", "test", op, "--device", device, "--no-lint", "--format", "json", "-o", str(out)]
    for dtype in dtypes:
        command += ["--dtype", dtype]
    started = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    data = json.loads(out.read_text()) if out.exists() else None
    return op, proc.returncode, seconds, data, proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("ops", nargs="*", help="operators (default: all)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", action="append", default=[], help="repeatable (default: each operator's dtypes)")
    parser.add_argument("--jobs", type=int, default=min(os.cpu_count() or 1, 8))
    parser.add_argument("-o", "--output", type=Path, required=True)
    args = parser.parse_args(argv)

    from accelport import fileio
    from accelport.kernels import OPERATOR_NAMES
    from accelport.kernels import lint as kernel_lint

    ops = args.ops or list(OPERATOR_NAMES)
    with tempfile.TemporaryDirectory(prefix="accelport-validate-") as tmp, ThreadPoolExecutor(max(1, args.jobs)) as pool:
        done = list(pool.map(lambda op: _one(op, args.device, args.dtype, Path(tmp)), ops))
    results, per_op, device, interpreter = [], {}, args.device, False
    for op, code, seconds, data, err in done:
        per_op[op] = {"exit": code, "seconds": round(seconds, 2), "checks": 0 if data is None else data["checks"], "error": err if data is None else ""}
        if data is not None:
            results.extend(data["results"])
            device, interpreter = data["device"], data["interpreter"]
    findings = [f.to_dict() for f in kernel_lint.lint_package()]
    failed = sum(not r["passed"] for r in results)
    complete = all(v["exit"] in (0, 1) and v["checks"] for v in per_op.values())
    report = {
        "device": device, "interpreter": interpreter, "passed": bool(results) and complete and not failed and not findings,
        "checks": len(results), "failed": failed, "lint": findings, "jobs": args.jobs, "ops": per_op, "results": results,
    }  # fmt: skip
    with fileio.atomic_open(args.output, "w") as handle:
        handle.write(json.dumps(report, indent=2) + "\n")
    print(f"validation: {len(results)} checks over {len(ops)} operators in {args.jobs} processes: {failed} failed"
          + "".join(f"; {op}: exit {v['exit']} {v['error']}" for op, v in per_op.items() if v["exit"] not in (0, 1) or not v["checks"]))  # fmt: skip
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
