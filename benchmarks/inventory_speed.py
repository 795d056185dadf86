"""Inventory speed against the incumbent grep, measured in the same run on the same tree.

Builds (or takes, with --tree) a 500k-line Python training-repository tree in which
about a quarter of the files use CUDA APIs, then times, start-up included:
  - `accelport inventory TREE --format json` in a fresh process (median of --repeat runs),
  - `grep -rE "cudaMalloc|cudaMemcpy|cublas|nccl|torch.cuda|numba.cuda" --include=*.py ...`
    writing its hits to a pipe, as a user reading them would (median of --repeat runs).
Prints one JSON object: wall times, lines per second, peak RSS, the ratio and the target (<= 15x grep).

The "cxx" section does the same on a generated C++/CUDA tree (inventory_cxx_speed.py):
accelport's lines per second beside grep's wall time, and `hipify-perl --examine` on the
same files when --hipify-perl PATH is given.

    python benchmarks/inventory_speed.py [--tree DIR] [--lines 500000] [--repeat 5] [--jobs N]
                                         [--cxx-lines 100000] [--hipify-perl PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from inventory_cxx_speed import build_tree as build_cxx_tree
from inventory_cxx_speed import cxx_benchmark
from synthetic_tree import build_python_tree

GREP_PATTERN = "cudaMalloc|cudaMemcpy|cublas|nccl|torch.cuda|numba.cuda"
TARGET_RATIO = 15.0


def installed_environment() -> dict[str, str]:
    """The environment of an installed accelport: its bytecode is compiled and used.

    Some machines set PYTHONDONTWRITEBYTECODE; with an editable install that makes every
    run recompile the package from source, which no installed copy does.
    """
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def compile_package() -> None:
    import accelport

    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(Path(accelport.__file__).parent)],
        env=installed_environment(),
        check=True,
    )


def _timed(cmd: list[str], cwd: Path) -> tuple[float, int, bytes]:
    """Wall seconds and peak RSS (KiB, largest process of the run) of one command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, check=False, env=installed_environment())
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if done.returncode not in (0, 1):
        raise SystemExit(f"{cmd[0]} failed ({done.returncode}): {done.stderr.decode()[-400:]}")
    return wall, max(after, before), done.stdout


def grep_command(extra_includes: tuple[str, ...] = ()) -> list[str]:
    includes = ["--include=*.py", "--include=*.cu", "--include=*.cpp", *extra_includes]
    return ["grep", "-rE", GREP_PATTERN, *includes, "."]


def measure(tree: Path, repeat: int, jobs: int | None) -> dict:
    accelport = [sys.executable, "-m", "accelport", "inventory", str(tree), "--format", "json", "--allow-skipped"]
    if jobs:
        accelport += ["--jobs", str(jobs)]
    compile_package()
    # Warm the page cache for both tools alike, then alternate runs so drift hits both.
    subprocess.run(grep_command(), cwd=tree, stdout=subprocess.DEVNULL, check=False)
    ours, theirs, peak = [], [], 0
    report = b""
    hits = b""
    for _ in range(repeat):
        wall, rss, report = _timed(accelport, Path.cwd())  # not the tree: a tree with types.py would shadow the stdlib
        ours.append(wall)
        peak = max(peak, rss)
        wall, _, hits = _timed(grep_command(), tree)
        theirs.append(wall)
    data = json.loads(report)
    lines = data["summary"]["lines_scanned"]
    ours_median = statistics.median(ours)
    grep_median = statistics.median(theirs)
    return {
        "lines": lines,
        "files": data["summary"]["files_scanned"],
        "files_with_findings": data["summary"]["files_with_findings"],
        "findings": data["summary"]["findings"],
        "grep_hits": hits.count(b"\n"),
        "grep_hits_per_1000_lines": round(hits.count(b"\n") * 1000 / max(lines, 1), 2),
        "accelport_wall_s": round(ours_median, 3),
        "accelport_wall_all_s": [round(t, 3) for t in ours],
        "accelport_lines_per_s": round(lines / ours_median),
        "accelport_peak_rss_mib": round(peak / 1024, 1),
        "grep_wall_s": round(grep_median, 4),
        "grep_wall_all_s": [round(t, 4) for t in theirs],
        "ratio_vs_grep": round(ours_median / grep_median, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", type=Path, help="use this tree instead of building one")
    parser.add_argument("--lines", type=int, default=500_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--jobs", type=int, help="accelport --jobs (default: its own default, the core count)")
    parser.add_argument("--cxx-lines", type=int, default=100_000, help="size of the C++/CUDA tree (0: skip the C++ section)")
    parser.add_argument("--hipify-perl", type=Path, help="a hipify-perl script to time with --examine on the C++ tree")
    args = parser.parse_args()
    workdir = None
    if args.tree:
        tree = args.tree
        built = {"root": str(tree)}
    else:
        workdir = Path(tempfile.mkdtemp(prefix="accelport-bench-"))
        tree = workdir / "tree"
        built = build_python_tree(tree, lines=args.lines)
    cxx = None
    try:
        python = measure(tree, args.repeat, args.jobs)
        if args.cxx_lines:
            with tempfile.TemporaryDirectory(prefix="accelport-bench-cxx-") as scratch:
                cxx_tree = Path(scratch) / "tree"
                build_cxx_tree(cxx_tree, args.cxx_lines)
                cxx = cxx_benchmark(cxx_tree, args.jobs, args.hipify_perl, repeat=args.repeat)
    finally:
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)
    result = {
        "benchmark": "inventory_speed",
        "cores": os.cpu_count(),
        "tree": built,
        "python": python,
        "target_ratio_max": TARGET_RATIO,
        "python_meets_target": python["ratio_vs_grep"] <= TARGET_RATIO,
        "cxx": cxx,
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
