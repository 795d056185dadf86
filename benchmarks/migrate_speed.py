"""How long `accelport migrate --check` takes next to `accelport inventory` on the same tree, in one run.

Builds (or takes) the 500k-line synthetic Python tree of the inventory benchmark, then
times both commands as subprocesses, start-up included, alternating them so machine
load hits both alike, each from compiled bytecode as an installed copy runs. Prints one JSON object: wall and CPU seconds of each (median of
`--repeat` runs), the ratio migrate / inventory (target: at most 3), and what migrate
found to change.

    python benchmarks/migrate_speed.py [--tree DIR] [--lines 500000] [--repeat 3] [--jobs N]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from inventory_speed import compile_package, installed_environment
from synthetic_tree import build_python_tree

ACCELPORT = [sys.executable, "-m", "accelport"]


def timed(command: list[str]) -> tuple[float, float, subprocess.CompletedProcess]:
    """Wall seconds, CPU seconds (the command and its workers) and the finished process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    process = subprocess.run(command, capture_output=True, text=True, check=False, env=installed_environment())
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, process


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", type=Path, help="an existing tree (default: build one in a temporary folder)")
    parser.add_argument("--lines", type=int, default=500_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    compile_package()  # both commands run from compiled bytecode, as an installed copy does

    with tempfile.TemporaryDirectory(prefix="accelport-migrate-bench-") as scratch:
        tree = args.tree
        built = None
        if tree is None:
            tree = Path(scratch) / "tree"
            built = build_python_tree(tree, lines=args.lines)
        jobs = ["--jobs", str(args.jobs)]
        inventory_cmd = [*ACCELPORT, "inventory", str(tree), "--format", "json", "-o", os.devnull, *jobs]
        migrate_cmd = [*ACCELPORT, "migrate", str(tree), "--check", "--format", "json", *jobs]
        inventory_runs, migrate_runs = [], []
        report = None
        for _ in range(args.repeat):
            wall, cpu, done = timed(inventory_cmd)
            if done.returncode not in (0, 1):
                raise SystemExit(f"inventory failed: {done.stderr.strip()}")
            inventory_runs.append((wall, cpu))
            wall, cpu, done = timed(migrate_cmd)
            if done.returncode not in (0, 1):
                raise SystemExit(f"migrate --check failed: {done.stderr.strip()}")
            migrate_runs.append((wall, cpu))
            report = json.loads(done.stdout)

    def median(runs: list[tuple[float, float]], index: int) -> float:
        return round(statistics.median(r[index] for r in runs), 3)

    inventory_wall, migrate_wall = median(inventory_runs, 0), median(migrate_runs, 0)
    inventory_cpu, migrate_cpu = median(inventory_runs, 1), median(migrate_runs, 1)
    summary = report["summary"] if report else {}
    print(
        json.dumps(
            {
                "tree": built or {"root": str(args.tree)},
                "jobs": args.jobs,
                "repeat": args.repeat,
                "inventory_wall_s": inventory_wall,
                "migrate_check_wall_s": migrate_wall,
                "ratio_wall": round(migrate_wall / inventory_wall, 2),
                "inventory_cpu_s": inventory_cpu,
                "migrate_check_cpu_s": migrate_cpu,
                "ratio_cpu": round(migrate_cpu / inventory_cpu, 2),
                "target_ratio": 3.0,
                "load_average_1min": round(os.getloadavg()[0], 2),
                "files_scanned": summary.get("files_scanned"),
                "files_with_findings": summary.get("files_with_findings"),
                "files_to_change": summary.get("files_changed"),
                "rewrites": summary.get("rewritten"),
                "markers": summary.get("marked"),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
