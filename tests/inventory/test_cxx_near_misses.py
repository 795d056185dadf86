"""Device-code and PyTorch C++ families: each positive case beside near misses in a comment, a string
literal and a look-alike identifier, none of which may be reported."""

from __future__ import annotations

import pytest

from accelport.inventory.base import SourceFile
from accelport.inventory.cxx import CxxScanner


def found(code: str, name: str, rules: set[str]) -> set[tuple[str, str]]:
    findings = CxxScanner().scan(SourceFile(name, code.encode("utf-8")))
    return {(f.rule_id, f.symbol) for f in findings if f.rule_id in rules}


# id, file name, rules in focus, positive code, what it must report, near misses (none may report a focus rule)
CASES = [
    (
        "shfl-full-mask",
        "k.cu",
        {"AP5005", "AP9101"},
        "__global__ void k(float* x) { x[0] = __shfl_down_sync(0xffffffff, x[0], 16); }",
        {("AP5005", "__shfl_down_sync"), ("AP9101", "__shfl_down_sync")},
        [
            "__global__ void k(float* x) { /* __shfl_down_sync(0xffffffff, x[0], 16) */ x[0] = 1; }",
            "__global__ void k(float* x) {\n  // x[0] = __shfl_xor_sync(0xffffffff, x[0], 1);\n  x[0] = 1;\n}",
            '__global__ void k(float* x) { printf("__shfl_down_sync(0xffffffff, v, 16)"); }',
            "__device__ float my_shfl_down_sync_helper(unsigned m, float v) { return v; }\n"
            "__global__ void k(float* x) { x[0] = my_shfl_down_sync_helper(0xffffffff, x[0]); }",
        ],
    ),
    (
        "warp-reduction-loop",
        "k.cu",
        {"AP9109"},
        "__device__ float sum(float v) {\n"
        "  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffff, v, offset);\n"
        "  for (unsigned o = 1; o < 32; o <<= 1) { v += __shfl_xor_sync(0xffffffff, v, o); }\n"
        "  return v;\n}",
        {("AP9109", "offset = 16"), ("AP9109", "o = 1")},
        [
            # From the device's warp size: portable.
            "__device__ float sum(float v) {\n"
            "  for (int offset = warpSize / 2; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffff, v, offset);\n"
            "  return v;\n}",
            # A halving loop over shared memory, no shuffle: not a warp reduction.
            "__global__ void k(float* s) { for (int st = 16; st > 0; st >>= 1) s[threadIdx.x] += s[threadIdx.x + st]; }",
            # A shuffle in the body whose offset is not the loop variable.
            "__device__ float f(float v) { for (int i = 16; i > 0; i /= 2) v += __shfl_down_sync(0xffffffff, v, 1); return v; }",
            # Host code, a comment and a string.
            "void host(float* v) { for (int o = 16; o > 0; o /= 2) v[o] = 0; }",
            "__device__ float f(float v) { /* for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(~0u, v, o); */ return v; }",
            '__device__ void f() { printf("for (int o = 16; o > 0; o /= 2) __shfl_down_sync(m, v, o)"); }',
        ],
    ),
    (
        "ballot-activemask",
        "k.cu",
        {"AP5005", "AP9101"},
        "__global__ void k(int* o) { unsigned m = __activemask(); o[0] = __ballot_sync(m, o[0] > 0); }",
        {("AP5005", "__activemask"), ("AP5005", "__ballot_sync")},
        [
            "__global__ void k(int* o) { /* unsigned m = __activemask(); */ o[0] = 0; }",
            '__global__ void k(int* o) { printf("__ballot_sync(0xffffffff, p) and __activemask()"); }',
            "__device__ unsigned my_activemask_like() { return 1u; }\n"
            "__global__ void k(int* o) { o[0] = my_activemask_like() + ballot_sync_count; }",
        ],
    ),
    (
        "lane-and-31",
        "k.cu",
        {"AP9102"},
        "__global__ void k(int* o) { int lane = threadIdx.x & 31; o[lane] = 0; }",
        {("AP9102", "threadIdx.x & 31")},
        [
            "__global__ void k(int* o) { /* int lane = threadIdx.x & 31; */ o[0] = 0; }",
            '__global__ void k(int* o) { printf("lane = threadIdx.x & 31\\n"); }',
            "__global__ void k(int* o) { o[0] = (threadIdx.x & 310) + (threadIdx.x && 31) + (threadIdx.x & 0x1f0); }",
            "int host_lane(int t) { return t & 31; }",
        ],
    ),
    (
        "atomics",
        "k.cu",
        {"AP5006"},
        "__global__ void k(float* s, int* c) { atomicAdd(s, 1.0f); atomicCAS(c, 0, 1); }",
        {("AP5006", "atomicAdd"), ("AP5006", "atomicCAS")},
        [
            "__global__ void k(float* s) { /* atomicAdd(s, 1.0f); */ s[0] = 1; }",
            '__global__ void k(float* s) { printf("atomicAdd(s, 1.0f) failed"); }',
            "__device__ float my_atomicAdd_helper(float* s) { return s[0]; }\n"
            "__global__ void k(float* s) { s[0] = my_atomicAdd_helper(s) + atomicAddCount; }",
        ],
    ),
    (
        "atomics-host-helper",
        "host.cpp",
        {"AP5006"},
        "__global__ void k(float* s) { atomicAdd(s, 1.0f); }",
        {("AP5006", "atomicAdd")},
        # A plain C++ file's own atomicAdd, outside device code, is not CUDA's.
        ["int atomicAdd(int* p, int v);\nvoid f(int* p) { atomicAdd(p, 1); }"],
    ),
    (
        "inline-asm",
        "k.cu",
        {"AP5007", "AP5008"},
        '__global__ void k(unsigned* r) { asm volatile("mov.u32 %0, %%laneid;" : "=r"(r[0])); }',
        {("AP5007", "asm")},
        [
            '__global__ void k(unsigned* r) { // asm volatile("mov.u32 %0, %%laneid;" : "=r"(r[0]));\n r[0] = 0; }',
            '__global__ void k(unsigned* r) { printf("asm volatile(\\"mma.sync.aligned\\")"); }',
            "__device__ int my_asm_helper(int v) { return v; }\n"
            "__global__ void k(int* r) { int asm_count = 0; r[0] = my_asm_helper(asm_count); }",
        ],
    ),
    (
        "aten-stream",
        "ext.cpp",
        {"AP1901"},
        "void f() { auto s = at::cuda::getCurrentCUDAStream(); }",
        {("AP1901", "at::cuda::getCurrentCUDAStream")},
        [
            "void f() { /* auto s = at::cuda::getCurrentCUDAStream(); */ }",
            'void f(bool ok) { TORCH_CHECK(ok, "at::cuda::getCurrentCUDAStream() failed"); }',
            "void f() { auto s = my::cuda::getCurrentCUDAStream(); auto t = getCurrentCUDAStreamHelper(); }",
        ],
    ),
    (
        "torch-library-cuda-key",
        "ops.cpp",
        {"AP1902", "AP5020"},
        'TORCH_LIBRARY_IMPL(myops, CUDA, m) { m.impl("fused_op", &fused_cuda); }',
        {("AP1902", "CUDA dispatch key"), ("AP5020", "TORCH_LIBRARY_IMPL(myops, CUDA, m)"), ("AP5020", "fused_op")},
        [
            '// TORCH_LIBRARY_IMPL(myops, CUDA, m) { m.impl("fused_op", &fused_cuda); }\nint x;',
            'const char* doc = "TORCH_LIBRARY_IMPL(myops, CUDA, m) registers fused_op";',
            'MY_TORCH_LIBRARY_IMPL_HELPER(myops, CUDA, m) { m.impl("fused_op", &fused_cuda); }',
        ],
    ),
]


@pytest.mark.parametrize(("name", "rules", "code", "expected"), [c[1:5] for c in CASES], ids=[c[0] for c in CASES])
def test_positive_case_is_reported(name, rules, code, expected):
    assert found(code, name, rules) == expected


@pytest.mark.parametrize(
    ("name", "rules", "code"),
    [(c[1], c[2], miss) for c in CASES for miss in c[5]],
    ids=[f"{c[0]}-{i}" for c in CASES for i in range(len(c[5]))],
)
def test_near_miss_is_not_reported(name, rules, code):
    assert found(code, name, rules) == set()


def test_cpu_dispatch_key_registers_the_operator_without_a_cuda_key_finding():
    code = 'TORCH_LIBRARY_IMPL(myops, CPU, m) { m.impl("fused_op", &fused_cpu); }'
    assert found(code, "ops.cpp", {"AP1902", "AP5020"}) == {("AP5020", "TORCH_LIBRARY_IMPL(myops, CPU, m)"), ("AP5020", "fused_op")}
