"""The C/C++/CUDA scanner: each family found in code, never in comments, strings or include paths."""

from __future__ import annotations

import pytest

from accelport.findings import BackendStatus, Category, Route
from accelport.inventory.base import ScanSkipped, SourceFile
from accelport.inventory.cxx import CxxScanner


def scan(code: str, name: str = "k.cu"):
    return CxxScanner().scan(SourceFile(name, code.encode("utf-8")))


def rules(code: str, name: str = "k.cu") -> list[tuple[str, str]]:
    return sorted((f.rule_id, f.symbol) for f in scan(code, name))


def only(findings, rule_id):
    return [f for f in findings if f.rule_id == rule_id]


# --------------------------------------------------------------------------- runtime / driver


def test_runtime_call_is_classified_with_its_hip_twin():
    [finding] = only(scan("void f(float* d) { cudaMalloc(&d, 16); }"), "AP2001")
    assert finding.symbol == "cudaMalloc"
    assert finding.category is Category.RUNTIME_API
    assert finding.family == "runtime"
    assert finding.replacement == "hipMalloc (ROCm)"
    assert finding.backends["rocm"] is BackendStatus.PORTABLE
    assert (finding.location.line, finding.location.column) == (1, 20)


def test_runtime_names_in_comments_strings_and_include_paths_are_not_calls():
    code = """
    #include "my_cudaMalloc_wrapper.h"
    // cudaMalloc(&d, 16); cudaFree(d);
    /* cudaMemcpy(a, b, n, cudaMemcpyHostToDevice); */
    void f() {
      const char* msg = "cudaMalloc failed";
      char c = 'c';
      int cudaMallocCount = 0;  // an identifier that only starts like the API
      log(R"(cudaFree(d))");
    }
    """
    assert rules(code) == []


def test_user_helpers_named_like_cuda_are_not_api():
    code = "void cudaCheck(int e); void f() { cudaCheck(1); my::cuda::thing(); std::atomic<int> a; }"
    assert rules(code, "k.cpp") == []


def test_driver_api_call_and_type():
    found = rules("void f() { CUdevice dev; cuDeviceGet(&dev, 0); }")
    assert ("AP3001", "cuDeviceGet") in found
    assert ("AP3002", "CUdevice") in found


def test_function_without_hip_equivalent_costs_more():
    [finding] = only(scan("void f() { cudaDeviceFlushGPUDirectRDMAWrites(t, s); }"), "AP2001")
    assert finding.effort.value == "medium"
    assert "no HIP equivalent" in finding.message
    assert finding.backends["rocm"] is BackendStatus.UNSUPPORTED


def test_types_are_reported_once_per_file_with_their_use_count():
    code = "cudaStream_t a; cudaStream_t b; void f(cudaStream_t c);"
    [finding] = only(scan(code), "AP2002")
    assert finding.symbol == "cudaStream_t"
    assert "3 uses in this file" in finding.message


def test_macro_bodies_are_scanned_at_the_exact_column_but_not_their_strings():
    code = '#define CHECK(x) do { if ((x) != cudaSuccess) puts("cudaGetLastError"); } while (0)\n'
    findings = scan(code)
    direct = [(f.symbol, f.location.column) for f in findings if f.rule_id != "AP4190"]
    assert direct == [("cudaSuccess", code.index("cudaSuccess") + 1)]
    # CHECK tests against a CUDA runtime constant: the macro itself is a wrapper its callers depend on.
    assert [(f.symbol, f.location.column) for f in only(findings, "AP4190")] == [("CHECK", code.index("CHECK") + 1)]


def test_columns_count_characters_after_non_ascii_text():
    code = 'const char* s = "größe"; int n = 0; void f() { cudaFree(p); }'
    [finding] = only(scan(code), "AP2001")
    assert finding.location.column == code.index("cudaFree") + 1


# --------------------------------------------------------------------------- launches and kernels

LAUNCHES = """
template <typename T, int N> __global__ void k(T* x, int n) { x[0] = 1; }
void host(float* x, int n, cudaStream_t s, dim3 g, dim3 b) {
  k<<<(n + 255) / 256, 256, 0, s>>>(x, n);
  k<T, 4><<<g, b>>>(x, n);
  k<<<
      g,
      b>>>(x,
           n);
  // k<<<1, 1>>>(x, n);  a commented-out launch
  puts("k<<<1, 1>>>(x, n)");
}
"""


def test_launches_with_expressions_template_arguments_and_line_breaks():
    launches = only(scan(LAUNCHES), "AP5003")
    assert [(f.symbol, f.location.line) for f in launches] == [("k", 4), ("k<T, 4>", 5), ("k", 6)]
    assert launches[0].message == "kernel launch k<<<(n + 255) / 256, 256, 0, s>>>"
    assert launches[1].message == "kernel launch k<T, 4><<<g, b>>>"
    assert launches[1].snippet == "k<T, 4><<<g, b>>>(x, n);"
    assert launches[2].location.end_line == 9


def test_kernel_definition_reports_size_launches_and_portable_operator():
    [kernel] = only(scan(LAUNCHES.replace("void k(", "void rms_norm_kernel(").replace("k<", "rms_norm_kernel<")), "AP5001")
    assert kernel.symbol == "rms_norm_kernel"
    assert kernel.category is Category.KERNEL
    assert kernel.route is Route.B
    assert "1 lines, launched 3× in this file" in kernel.message
    assert kernel.replacement == "accelport.kernels rms_norm"


def test_kernel_without_known_equivalent_has_no_replacement():
    code = "__global__ void scatter_tokens(int* x) {\n" + "  x[threadIdx.x] = 0;\n" * 20 + "}\n"
    [kernel] = only(scan(code), "AP5001")
    assert kernel.replacement is None
    assert kernel.effort.value == "high"
    assert "22 lines, no launch in this file" in kernel.message


def test_device_function_and_launch_api():
    code = "__device__ float twice(float v) { return 2 * v; }\nvoid f() { cudaLaunchCooperativeKernel((void*)k, g, b, args, 0, s); }"
    found = rules(code)
    assert ("AP5002", "twice") in found
    assert ("AP5004", "cudaLaunchCooperativeKernel") in found


def test_operator_registrations_bridge_python_to_the_kernel():
    code = """
    TORCH_LIBRARY_IMPL(myops, CUDA, m) { m.impl("softmax_fwd", &softmax_cuda); }
    PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("layer_norm", &ln, "doc"); }
    """
    findings = scan(code, "ops.cpp")
    registered = [(f.symbol, f.replacement) for f in only(findings, "AP5020")]
    assert ("softmax_fwd", "accelport.kernels softmax") in registered
    assert ("layer_norm", "accelport.kernels layer_norm") in registered
    assert any(f.symbol.startswith("PYBIND11_MODULE(") for f in only(findings, "AP5020"))
    assert [f.symbol for f in only(findings, "AP1902")] == ["CUDA dispatch key"]


# --------------------------------------------------------------------------- device code and hazards


def test_warp_intrinsic_with_full_mask_and_lane_arithmetic():
    code = """
    __device__ float warp_sum(float v, unsigned mask) {
      int lane = threadIdx.x & 31;
      int warp = threadIdx.x / 32;
      v += __shfl_down_sync(0xffffffff, v, 16);
      v += __shfl_xor_sync(mask, v, 1);
      return v;
    }
    void host(int n) { int blocks = n / 32; unsigned all = 0xffffffff; }
    """
    found = rules(code)
    assert ("AP5005", "__shfl_down_sync") in found
    assert ("AP5005", "__shfl_xor_sync") in found
    assert [s for r, s in found if r == "AP9101"] == ["__shfl_down_sync"]  # a variable mask is not flagged
    assert sorted(s for r, s in found if r == "AP9102") == ["threadIdx.x & 31", "threadIdx.x / 32"]  # host n / 32 is not


def test_warp_hazard_status_follows_vendor_warp_size():
    [mask] = only(scan("__global__ void k(float v) { __ballot_sync(0xffffffff, v > 0); }"), "AP9101")
    assert mask.backends["cuda"] is BackendStatus.OK
    assert mask.backends["rocm"] is BackendStatus.PORTABLE  # 64-wide: fix the mask
    assert mask.backends["npu"] is BackendStatus.UNSUPPORTED  # no warps at all


def test_fixed_32_thread_blocks_and_warp_size_constant():
    code = (
        "#define WARP_SIZE 32\nconstexpr int kWarpSize = 32;\nconstexpr int kBlock = 32;\n"
        "__global__ void __launch_bounds__(32) one_warp(float* x) {}\n__global__ void __launch_bounds__(256) wide(float* x) {}\n"
        "void f() { k<<<n, 32>>>(x); k<<<n, 64>>>(x); }"
    )
    found = rules(code)
    assert sorted(s for r, s in found if r == "AP9103") == ["k", "one_warp"]
    assert sorted(s for r, s in found if r == "AP9108") == ["WARP_SIZE", "kWarpSize"]


def test_fp64_only_in_device_code_once_per_function():
    code = "__global__ void acc(double* x) { double a = x[0]; double b = a; }\ndouble host_mean(double* v);"
    hazards = only(scan(code), "AP9104")
    assert [f.symbol for f in hazards] == ["acc"]
    assert hazards[0].backends["npu"] is BackendStatus.UNSUPPORTED
    assert hazards[0].backends["cuda"] is BackendStatus.OK


def test_dynamic_parallelism_unified_memory_and_textures():
    code = """
    __managed__ int counter;
    __global__ void child() {}
    __global__ void parent(cudaTextureObject_t tex) { child<<<1, 64>>>(); float v = tex2D<float>(tex, 0, 0); }
    void f(float** p) { cudaMallocManaged(p, 64); }
    """
    found = rules(code)
    assert ("AP9106", "child") in found
    assert ("AP9107", "__managed__") in found and ("AP9107", "cudaMallocManaged") in found
    assert ("AP9105", "cudaTextureObject_t") in found and ("AP9105", "tex2D") in found


def test_inline_ptx_tensor_core_atomics_and_arch_guards():
    code = """
    #include <mma.h>
    __global__ void k(float* s, unsigned* r) {
    #if __CUDA_ARCH__ >= 800
      asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0}, {%1}, {%2}, {%3};" : "=r"(r[0]));
    #endif
      atomicAdd(s, 1.0f);
      nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> acc;
    }
    """
    found = rules(code)
    assert ("AP5009", "__CUDA_ARCH__") in found
    assert ("AP5007", "asm") in found
    assert ("AP5008", "mma (PTX)") in found
    assert ("AP5008", "nvcuda::wmma::fragment") in found
    assert ("AP5006", "atomicAdd") in found
    assert ("AP5010", "mma.h") in found


# --------------------------------------------------------------------------- libraries and ATen

LIBRARY_CASES = [
    ("cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &a, A, m, B, k, &b, C, m);", "AP4101", "cublasSgemm", "cublas"),
    ("cudnnSoftmaxForward(h, algo, mode, &a, x, px, &b, y, py);", "AP4102", "cudnnSoftmaxForward", "cudnn"),
    ("cufftExecC2C(plan, in, out, CUFFT_FORWARD);", "AP4103", "cufftExecC2C", "cufft"),
    ("curandGenerateUniform(gen, ptr, n);", "AP4104", "curandGenerateUniform", "curand"),
    ("cusolverDnSgetrf(h, m, n, A, lda, w, ipiv, info);", "AP4105", "cusolverDnSgetrf", "cusolver"),
    ("cusparseSpMM(h, a, b, &al, A, B, &be, C, t, alg, buf);", "AP4106", "cusparseSpMM", "cusparse"),
    ("cub::DeviceReduce::Sum(tmp, bytes, in, out, n, s);", "AP4107", "cub::DeviceReduce::Sum", "cub"),
    ("thrust::sort(thrust::device, v.begin(), v.end());", "AP4108", "thrust::sort", "thrust"),
    ("ncclAllReduce(b, b, n, ncclFloat, ncclSum, comm, s);", "AP4109", "ncclAllReduce", "nccl"),
    ("cutlass::gemm::device::Gemm<float, Row> op;", "AP4110", "cutlass::gemm::device::Gemm", "cutlass"),
    ("auto layout = cute::make_layout(shape);", "AP4110", "cute::make_layout", "cute"),
    ("cutensorContract(h, plan, &a, A, B, &b, C, D, w, ws, s);", "AP4111", "cutensorContract", "cutensor"),
    ('nvtxRangePushA("step");', "AP4112", "nvtxRangePushA", "nvtx"),
    ("nvrtcCompileProgram(prog, n, opts);", "AP4113", "nvrtcCompileProgram", "rtc"),
    ("auto z = cuCmulf(a, b);", "AP4114", "cuCmulf", "cucomplex"),
]


@pytest.mark.parametrize(("call", "rule_id", "symbol", "family"), LIBRARY_CASES, ids=[c[3] for c in LIBRARY_CASES])
def test_library_call_and_its_near_miss(call, rule_id, symbol, family):
    findings = [f for f in scan(f"void f() {{ {call} }}") if f.rule_id == rule_id and f.symbol == symbol]
    assert len(findings) == 1, scan(f"void f() {{ {call} }}")
    assert findings[0].family == family
    assert findings[0].category is Category.LIBRARY_CALL
    near_miss = f'// {call}\nvoid f() {{ puts("{call.replace(chr(34), "")}"); }}'
    assert rules(near_miss) == []


def test_nccl_names_the_ascend_equivalent_and_gemm_names_the_operator():
    [nccl] = only(scan("void f() { ncclAllReduce(b, b, n, t, op, comm, s); }"), "AP4109")
    assert "npu: HcclAllReduce" in nccl.message
    assert nccl.backends["rocm"] is BackendStatus.PORTABLE
    assert nccl.backends["npu"] is BackendStatus.ALTERNATIVE
    [gemm] = only(scan("void f() { cublasSgemm(h, a, b, m, n, k, &x, A, m, B, k, &y, C, m); }"), "AP4101")
    assert gemm.replacement == "accelport.kernels gemm"


def test_aten_cuda_api_and_device_checks():
    code = """
    #include <ATen/cuda/CUDAContext.h>
    void f(at::Tensor x) {
      auto s = at::cuda::getCurrentCUDAStream();
      c10::cuda::CUDAGuard guard(x.device());
      TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
      auto d = at::kCUDA;
    }
    """
    found = rules(code, "ext.cpp")
    assert ("AP1901", "at::cuda::getCurrentCUDAStream") in found
    assert ("AP1901", "c10::cuda::CUDAGuard") in found
    assert ("AP1902", "is_cuda") in found
    assert ("AP1910", "ATen/cuda/CUDAContext.h") in found
    assert any(r == "AP1902" and "kCUDA" in s for r, s in found)


def test_headers_by_family():
    code = "#include <cuda_runtime.h>\n#include <cuda.h>\n#include <cublas_v2.h>\n#include <thrust/sort.h>\n#include <cooperative_groups.h>\n#include <vector>\n"
    assert rules(code) == [
        ("AP2010", "cuda_runtime.h"),
        ("AP3010", "cuda.h"),
        ("AP4010", "cublas_v2.h"),
        ("AP4010", "thrust/sort.h"),
        ("AP5010", "cooperative_groups.h"),
    ]


def test_unparseable_file_is_skipped_with_a_reason():
    with pytest.raises(ScanSkipped, match="syntax errors cover"):
        scan(")))) ]]] <<<>>> }}}}}} cudaMalloc {{{ ((( \x01 " * 20)


def test_kernel_launches_are_counted_across_files(tmp_path):
    from accelport.inventory import scan as inventory

    (tmp_path / "softmax.cuh").write_text("template <int B> __global__ void softmax_kernel(float* x) { x[0] = 0; }\n")
    (tmp_path / "ops.cu").write_text('#include "softmax.cuh"\nvoid run(float* x) {\n  softmax_kernel<128><<<1, 128>>>(x);\n}\n')
    (tmp_path / "more.cu").write_text('#include "softmax.cuh"\nvoid again(float* x) { ns::softmax_kernel<64><<<2, 64>>>(x); }\n')
    report = inventory([str(tmp_path)], jobs=1)
    [kernel] = [f for f in report.findings if f.rule_id == "AP5001"]
    assert kernel.location.path.endswith("softmax.cuh")
    assert "launched 2× by name (0 in this file, 2 elsewhere:" in kernel.message
    assert "more.cu:2" in kernel.message and "ops.cu:3" in kernel.message
    assert kernel.replacement == "accelport.kernels softmax"


def test_device_only_names_in_plain_cpp_host_code_are_not_cuda():
    code = "int atomicAdd(int* p, int v) { return *p += v; }\nstruct texture { int w; };\nvoid f() { texture t; atomicAdd(&t.w, 1); }\n"
    assert rules(code, "host.cpp") == []
    assert ("AP5006", "atomicAdd") in rules("__device__ void g(int* p) { atomicAdd(p, 1); }", "shared.h")


def test_every_grep_hit_in_the_example_extension_is_reported_or_a_comment():
    """The issue's grep baseline over csrc/: each matching line is a finding, or a `//` comment line."""
    import re
    from pathlib import Path

    source = Path(__file__).resolve().parents[2] / "examples/legacy_cuda_app/csrc/rms_norm_kernel.cu"
    grep = re.compile(r"cudaMalloc|cudaMemcpy|cublas|nccl|torch.cuda|numba.cuda")
    text = source.read_text()
    hits = {n for n, line in enumerate(text.splitlines(), start=1) if grep.search(line)}
    reported = {f.location.line for f in scan(text, source.name)}
    comments = {n for n in hits if text.splitlines()[n - 1].lstrip().startswith("//")}
    assert comments, "the example keeps a comment that mentions CUDA calls (the near miss)"
    assert hits - comments <= reported
    assert not comments & reported
