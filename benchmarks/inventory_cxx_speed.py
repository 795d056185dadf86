"""Inventory speed on a C++/CUDA tree: accelport vs grep (and hipify-perl --examine when given) in one run.

Usage: .venv/bin/python benchmarks/inventory_cxx_speed.py [--lines N] [--tree DIR] [--jobs N]
                                                         [--hipify-perl PATH/TO/hipify-perl]

Builds (or takes) a tree of .cu/.cuh/.cpp files in which kernels, launches,
runtime and library calls sit beside comments and strings that mention the same
names, then times on the same files:
  * `accelport inventory TREE --format json` as a subprocess (start-up included),
  * grep -rE "cudaMalloc|cudaMemcpy|cublas|nccl|torch.cuda|numba.cuda" with the
    --include set of the Python benchmark,
  * `perl hipify-perl --examine FILES...` when --hipify-perl is given.
Prints one JSON object. `benchmarks/inventory_speed.py` calls `build_tree()` and
`cxx_benchmark()` for the "cxx" section of its report.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GREP_PATTERN = "cudaMalloc|cudaMemcpy|cublas|nccl|torch.cuda|numba.cuda"
GREP_INCLUDES = ("*.py", "*.cu", "*.cpp")

_KERNEL_FILE = """\
// {name}.cu: kernels for the {name} operator.
// History: this used cudaMalloc and cudaMemcpy directly, and an ncclAllReduce
// on the gradients; cublasSgemm moved to the caller.
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <nccl.h>
#include <ATen/cuda/CUDAContext.h>

#define WARP_SIZE 32
#define CUDA_CHECK(x) do {{ cudaError_t e = (x); if (e != cudaSuccess) {{ printf("cudaMalloc failed: %s", cudaGetErrorString(e)); }} }} while (0)

namespace {name}_ns {{

__device__ __forceinline__ float warp_sum_{i}(float v) {{
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffff, v, o);
  return v;
}}

template <typename T, int BLOCK>
__global__ void {name}_forward_kernel(T* __restrict__ out, const T* __restrict__ in, int n, float eps) {{
  __shared__ float partial[32];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x / WARP_SIZE;
  float acc = 0.f;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {{
    float v = static_cast<float>(in[i]);
    acc += v * v;  // sum of squares
  }}
  acc = warp_sum_{i}(acc);
  if (lane == 0) partial[warp] = acc;
  __syncthreads();
  if (threadIdx.x < 32) {{
    acc = threadIdx.x < BLOCK / 32 ? partial[threadIdx.x] : 0.f;
    acc = warp_sum_{i}(acc);
    if (threadIdx.x == 0) atomicAdd(reinterpret_cast<float*>(out), acc);
  }}
}}

void launch_{name}(float* out, const float* in, int n, cudaStream_t stream) {{
  const char* msg = "launching {name}: cudaMemcpy and cublas are not used here";
  {name}_forward_kernel<float, 256><<<(n + 255) / 256, 256, 0, stream>>>(out, in, n, 1e-6f);
  CUDA_CHECK(cudaGetLastError());
}}

void project_{i}(cublasHandle_t handle, const float* a, const float* b, float* c, int m) {{
  const float one = 1.f, zero = 0.f;
  cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, m, m, m, &one, a, m, b, m, &zero, c, m);
}}

void sync_{i}(float* grad, size_t count, ncclComm_t comm) {{
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  ncclAllReduce(grad, grad, count, ncclFloat, ncclSum, comm, stream);
  float* staging = nullptr;
  cudaMalloc(&staging, count * sizeof(float));
  cudaMemcpyAsync(staging, grad, count * sizeof(float), cudaMemcpyDeviceToDevice, stream);
  cudaFree(staging);
}}

}}  // namespace {name}_ns
"""

_HOST_FILE = """\
// {name}.cpp: host-side helpers with no CUDA in code (the words cudaMalloc, nccl
// and cublas appear only in this comment and in the strings below).
#include <string>
#include <vector>
#include <algorithm>

namespace {name}_ns {{

std::string describe_{i}(int n) {{
  std::string s = "buffers are allocated with cudaMalloc by the caller";
  for (int i = 0; i < n; ++i) {{
    s += std::to_string(i);
    if (i % 7 == 0) s += ",";
  }}
  return s;
}}

int checksum_{i}(const std::vector<int>& v) {{
  int total = 0;
  for (int x : v) total = (total * 31 + x) % 1000003;
  std::vector<int> sorted(v);
  std::sort(sorted.begin(), sorted.end());
  return total + (sorted.empty() ? 0 : sorted.front());
}}

}}  // namespace {name}_ns
"""

_HEADER_FILE = """\
#pragma once
// {name}.cuh: declarations.
#include <cuda_runtime.h>
namespace {name}_ns {{
void launch_{name}(float* out, const float* in, int n, cudaStream_t stream);
int checksum_{i}(const std::vector<int>& v);
}}
"""


def build_tree(root: Path, target_lines: int) -> dict[str, int]:
    """Write about `target_lines` lines of C++/CUDA under `root`; about a third of the files use CUDA."""
    files = lines = 0
    i = 0
    while lines < target_lines:
        folder = root / f"module_{i // 50:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        name = f"op{i:05d}"
        for suffix, template in ((".cu", _KERNEL_FILE), (".cpp", _HOST_FILE), (".cpp", _HOST_FILE), (".cuh", _HEADER_FILE)):
            stem = name if suffix != ".cpp" or not (folder / f"{name}.cpp").exists() else f"{name}_util"
            text = template.format(name=stem if suffix == ".cpp" else name, i=i)
            (folder / f"{stem}{suffix}").write_text(text)
            files += 1
            lines += text.count("\n")
        i += 1
    return {"files": files, "lines": lines}


def _timed(cmd: list[str], cwd: Path | None = None) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, timeout=3600, check=False)
    return time.perf_counter() - start, done


def grep_command() -> list[str]:
    return ["grep", "-rE", GREP_PATTERN, *(f"--include={g}" for g in GREP_INCLUDES), "."]


def cxx_benchmark(tree: Path, jobs: int | None = None, hipify_perl: Path | None = None, repeat: int = 3) -> dict:
    """Figures for one C++/CUDA tree, all measured in this call (medians of `repeat` alternating runs)."""
    sources = sorted(p for p in tree.rglob("*") if p.suffix in (".cu", ".cuh", ".cpp", ".cc", ".h", ".hpp"))
    lines = sum(p.read_bytes().count(b"\n") for p in sources)
    subprocess.run(grep_command(), cwd=tree, stdout=subprocess.DEVNULL, check=False)  # warm the page cache
    ours: list[float] = []
    theirs: list[float] = []
    hits = b""
    with tempfile.TemporaryDirectory(prefix="accelport-cxx-report-") as scratch:
        output = Path(scratch) / "report.json"
        accelport = [sys.executable, "-m", "accelport", "inventory", str(tree), "--format", "json", "-o", str(output)]
        if jobs:
            accelport += ["--jobs", str(jobs)]
        for _ in range(repeat):
            seconds, done = _timed(accelport)
            if done.returncode not in (0, 1):
                raise RuntimeError(f"accelport inventory failed ({done.returncode}): {done.stderr.decode()[-400:]}")
            ours.append(seconds)
            seconds, grep_done = _timed(grep_command(), cwd=tree)
            theirs.append(seconds)
            hits = grep_done.stdout
        summary = json.loads(output.read_text())["summary"]
    ours_median = statistics.median(ours)
    grep_median = statistics.median(theirs)
    result = {
        "tree": {"files": len(sources), "lines": lines},
        "accelport_wall_s": round(ours_median, 3),
        "accelport_wall_all_s": [round(t, 3) for t in ours],
        "accelport_lines_per_s": round(lines / ours_median),
        "findings": summary["findings"],
        "files_scanned": summary["files_scanned"],
        "files_skipped": summary["files_skipped"],
        "by_category": {k: v for k, v in summary["by_category"].items() if v},
        "jobs": jobs or os.cpu_count(),
        "grep_wall_s": round(grep_median, 4),
        "grep_hits": hits.count(b"\n"),
        "grep_command": " ".join(grep_command()),
        "ratio_vs_grep": round(ours_median / grep_median, 1) if grep_median else None,
    }
    if hipify_perl is None:
        result["hipify_perl"] = {"run": False, "reason": "no --hipify-perl PATH given (hipify-perl is not installed here)"}
    elif not hipify_perl.is_file() or shutil.which("perl") is None:
        result["hipify_perl"] = {"run": False, "reason": f"{hipify_perl} not found or perl missing"}
    else:
        cu_files = [str(p) for p in sources if p.suffix in (".cu", ".cuh", ".cpp")]
        h_seconds, h_done = _timed(["perl", str(hipify_perl), "--examine", *cu_files])
        result["hipify_perl"] = {"run": True, "wall_s": round(h_seconds, 3), "exit_code": h_done.returncode, "files": len(cu_files)}
        result["ratio_hipify_perl_vs_accelport"] = round(h_seconds / ours_median, 1)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=100_000, help="size of the generated tree (default 100000)")
    parser.add_argument("--tree", type=Path, help="scan this tree instead of generating one")
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--hipify-perl", type=Path, default=None, help="path of a hipify-perl script to time on the same files")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="accelport-cxx-bench-") as scratch:
        tree = args.tree
        if tree is None:
            tree = Path(scratch) / "tree"
            build_tree(tree, args.lines)
        print(json.dumps(cxx_benchmark(tree, args.jobs, args.hipify_perl, args.repeat), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
