"""Operator benchmarks: each operator's achieved TFLOP/s or GB/s and fraction of peak, beside PyTorch's op.

Both are timed in this run, on the same device and inputs (accelport.kernels.bench).
On an accelerator the timed implementation is the Triton kernel dispatch selects
and the matrix is each operator's benchmark cases; on CPU it is the PyTorch
reference over the small matrix, and every row says so (Triton kernels run on CPU
only under the interpreter, whose speed means nothing). Prints one JSON object:
the rows, and the GPU targets (met, missed, or not measurable here).

    python benchmarks/kernels.py [OP ...] [--device cuda] [--dtype bfloat16] [--cases small|device|bench]
"""

from __future__ import annotations

import argparse
import json
import sys

from accelport.kernels import bench, registry


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("ops", nargs="*", help="operators (default: all)")
    parser.add_argument("--device", default=None, help="torch device (default: the accelerator torch sees, else cpu)")
    parser.add_argument("--dtype", action="append", choices=("float32", "float16", "bfloat16"), help="repeatable (default: bfloat16)")
    parser.add_argument("--cases", choices=("small", "device", "bench"), help="matrix (default: bench; small on CPU)")
    args = parser.parse_args(argv)

    import torch

    device = args.device or (str(torch.accelerator.current_accelerator()) if torch.accelerator.is_available() else "cpu")
    bench.check_device(device)
    results = bench.run(registry.operators(args.ops or None), device, args.dtype or ["bfloat16"], args.cases)
    report = {
        "benchmark": "accelport.kernels operators vs PyTorch",
        "device": device,
        "results": [r.to_dict() for r in results],
        "targets": [t.to_dict() for t in bench.check_targets(results)],
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
