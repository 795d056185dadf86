"""`accelport compare` on two full-tensor dumps of about 2 GB each: throughput and peak memory.

Writes two dumps with `accelport.verify.capture(tensors=True)`: --records ops per dump, each
a float32 tensor of --elements elements produced from a random input (the input and the
output are both saved, so each op adds 2 x elements x 4 bytes). TEST's values differ from
REF's by a relative 1e-4, so every tensor is read and measured in full (no checksum
shortcut), and the verdict is pass. Then, in a fresh process so that nothing of the
generation counts:

  - `compare_dumps(REF, TEST)`, timed, with its peak RSS;
  - for comparison, a plain sequential read of both dumps' tensor files (what the disk or
    page cache delivers with no work at all), timed.

Throughput is the tensor bytes over the compare's wall time, printed per dump (one dump's
bytes: what the target is about) and for both dumps together. The dumps are deleted
afterwards unless --keep. Target: at least 500 MB/s per dump, peak RSS under 1 GB.

    python benchmarks/compare_speed.py [--size-gb 2] [--elements 16777216] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_MB_S = 500.0
TARGET_RSS_MB = 1024.0

CHILD = r"""
import json, resource, sys, time
from pathlib import Path
mode, ref, test = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
start = time.perf_counter()
if mode == "compare":
    from accelport.verify.numerics.compare import compare_dumps
    with compare_dumps(ref, test) as result:
        out = {"verdict": result.verdict, "bytes_read": result.bytes_read, "tensors": result.counts["tensors"],
               "records": result.counts["matched"], "failed": result.counts["failed"]}
else:
    total = 0
    buffer = bytearray(16 << 20)
    for folder in (ref, test):
        for path in sorted((folder / "tensors").glob("*.safetensors")):
            with open(path, "rb", buffering=0) as handle:
                while (got := handle.readinto(buffer)):
                    total += got
    out = {"bytes_read": total}
out["seconds"] = time.perf_counter() - start
# VmHWM belongs to this process image; ru_maxrss would carry the forking parent's peak over exec.
status = Path("/proc/self/status")
hwm = [line for line in status.read_text().splitlines() if line.startswith("VmHWM:")] if status.exists() else []
out["peak_rss_mb"] = int(hwm[0].split()[1]) / 1024 if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(out))
"""


def generate(folder: Path, records: int, elements: int, scale: float) -> None:
    import torch

    from accelport.verify import capture

    generator = torch.Generator().manual_seed(0)
    with capture(folder, tensors=True, step_on="manual", param_checksums=False) as cap:
        for index in range(records):
            x = torch.randn(elements, generator=generator)
            torch.mul(x, scale)  # one op: its input and output land in the dump
            if (index + 1) % 8 == 0:
                cap.step()  # several step files, as a real multi-step dump has


def child(mode: str, ref: Path, test: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1] / "src"))
    done = subprocess.run(
        [sys.executable, "-c", CHILD, mode, str(ref), str(test)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--size-gb", type=float, default=2.0, help="tensor data per dump (default: %(default)s)"
    )
    parser.add_argument(
        "--elements", type=int, default=1 << 24, help="elements per tensor (default: 16M, 64 MiB)"
    )
    parser.add_argument("--keep", metavar="DIR", help="generate into DIR and keep the dumps")
    args = parser.parse_args()
    records = max(1, round(args.size_gb * 1e9 / (2 * 4 * args.elements)))
    root = (
        Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="accelport-compare-speed-"))
    )
    ref, test = root / "ref", root / "test"
    try:
        started = time.perf_counter()
        if not (ref / "manifest.jsonl").exists():
            generate(ref, records, args.elements, 1.0)
            generate(test, records, args.elements, 1.0001)
        generation = time.perf_counter() - started
        sizes = {
            name: sum(p.stat().st_size for p in (folder / "tensors").glob("*"))
            for name, folder in (("ref", ref), ("test", test))
        }
        read = child(
            "read", ref, test
        )  # also brings both dumps into the page cache for both runs alike
        compared = child("compare", ref, test)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    total_mb = compared["bytes_read"] / 1e6
    result = {
        "benchmark": "compare_speed",
        "dump_bytes": sizes,
        "records_per_dump": compared["records"],
        "tensors_compared": compared["tensors"],
        "verdict": compared["verdict"],
        "compare_seconds": round(compared["seconds"], 2),
        "compare_mb_per_s_both_dumps": round(total_mb / compared["seconds"], 1),
        "compare_mb_per_s_per_dump": round(total_mb / 2 / compared["seconds"], 1),
        "compare_peak_rss_mb": round(compared["peak_rss_mb"], 1),
        "plain_read_seconds": round(read["seconds"], 2),
        "plain_read_mb_per_s_both_dumps": round(read["bytes_read"] / 1e6 / read["seconds"], 1),
        "plain_read_peak_rss_mb": round(read["peak_rss_mb"], 1),
        "generation_seconds": round(generation, 1),
        "cpus": os.cpu_count(),
        "load_average": [round(v, 2) for v in os.getloadavg()],
        "target_mb_per_s_per_dump": TARGET_MB_S,
        "target_peak_rss_mb": TARGET_RSS_MB,
        "meets_target": total_mb / 2 / compared["seconds"] >= TARGET_MB_S
        and compared["peak_rss_mb"] < TARGET_RSS_MB,
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
