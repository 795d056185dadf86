"""Idioms found missing when inventory was measured against real trees (benchmarks/recall.py), each on a small synthetic file."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from accelport.inventory import scan
from accelport.inventory.base import SourceFile
from accelport.inventory.cxx import CxxScanner

# --------------------------------------------------------------------------- Python


def test_a_chained_call_on_a_cuda_attribute_reports_the_cuda_part(scan_code):
    found = scan_code(
        """
        import torch
        version = ".".join(torch.version.cuda.split(".")[:2])
        major = torch.cuda.get_device_properties(0).major
        enabled = torch.backends.cudnn.enabled.real
        """
    )
    assert ("AP1604", 3, "torch.version.cuda") in found
    assert ("AP1108", 4, "torch.cuda.get_device_properties") in found
    assert any(rule == "AP1404" and line == 5 for rule, line, _symbol in found)


def test_an_import_inside_a_function_binds_the_names_used_below_it(scan_code):
    # DeepSpeed's op builders import torch inside methods, in a try block.
    found = scan_code(
        """
        class Builder:
            def nvcc_args(self):
                try:
                    import torch
                except ImportError:
                    return []
                major = torch.cuda.get_device_properties(0).major  #ignore-cuda
                return [f"-DGPU_ARCH={major}"]

            def cuda_home(self):
                from torch.utils.cpp_extension import CUDA_HOME
                return CUDA_HOME
        """
    )
    assert ("AP1108", 8, "torch.cuda.get_device_properties") in found
    assert any(rule == "AP6002" and line == 12 for rule, line, _symbol in found)


def test_a_cuda_namespace_of_a_cuda_only_package_is_reported_at_each_use_with_low_effort(tmp_path):
    path = tmp_path / "comm.py"
    path.write_text("import cupy\n\ncupy.cuda.Device(0).use()\nx = cupy.zeros(3)\n")
    findings = scan([str(path)], jobs=1).findings
    by_line = {f.location.line: f for f in findings}
    assert by_line[1].effort.value == "high"  # the import carries the package's porting effort
    assert by_line[3].rule_id == "AP8001" and by_line[3].effort.value == "low"
    assert 4 not in by_line  # cupy.zeros is not the CUDA namespace


def test_cublas_environment_variables_are_found_on_lines_with_no_other_cuda_token(scan_code):
    found = scan_code('import os\n\nos.environ["CUBLAS_WORKSPACE_CONFIG"] = ":16:8"\n')
    assert found == [("AP1603", 3, "CUBLAS_WORKSPACE_CONFIG")]


def test_the_cuda_dispatch_key_string_is_a_review_item(scan_code):
    found = scan_code('import torch\n\n@torch.library.impl(lib, "scaled_mm", "CUDA")\ndef f(): pass\nprint("CUDA ready")\n')
    assert found == [("AP1007", 3, "CUDA")]


def test_torch_helpers_for_cuda_tests_and_arch_flags_are_catalogued(scan_code):
    found = scan_code(
        """
        from torch.testing._internal.common_cuda import TEST_CUDA
        from torch.utils.cpp_extension import _get_cuda_arch_flags
        if TEST_CUDA:
            flags = _get_cuda_arch_flags()
        """
    )
    rules = {(rule, line) for rule, line, _symbol in found}
    assert {("AP1113", 2), ("AP1109", 3), ("AP1113", 4), ("AP1109", 5)} <= rules


def test_a_projects_compiled_cuda_extension_import_is_reported_but_not_its_python_modules(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "cuda_helpers.py").write_text("x = 1\n")
    (package / "ops.py").write_text(
        "import focal_loss_cuda\nimport cuda_helpers\nfrom nccl_p2p_cuda import exchange\nimport flash_attn_2_cuda as fa\n"
    )
    findings = scan([str(package / "ops.py")], jobs=1).findings
    assert [(f.rule_id, f.location.line, f.symbol) for f in findings] == [
        ("AP8002", 1, "focal_loss_cuda"),
        ("AP8002", 3, "nccl_p2p_cuda"),
        ("AP8002", 4, "flash_attn_2_cuda"),
    ]


def test_identifiers_that_merely_contain_a_cuda_token_stay_unreported(scan_code):
    # Left alone by design: a project's own names (docs/inventory.md, "identifier only").
    assert scan_code("nccl_init_method = 'tcp://'\nuse_cuda_graph = False\ndef layer_norm_cuda(x):\n    return x\n") == []


# --------------------------------------------------------------------------- C/C++/CUDA

HEADER = """\
#pragma once
#include <cublas_v2.h>
#define CUBLAS_LOWP CUDA_R_16BF // CUDA_R_16F or cudaFree(p) in a comment
inline void cublasCheck_(cublasStatus_t status, const char *file, int line) {
    if (status != CUBLAS_STATUS_SUCCESS) { exit(1); }
}
#define cublasCheck(status) (cublasCheck_((status), __FILE__, __LINE__))
class NvtxRange {
 public:
    NvtxRange(const char* s) { nvtxRangePush(s); }
    ~NvtxRange() { nvtxRangePop(); }
};
void matmul_cublaslt(float* out, const float* a) {
    cublasLtMatmul(handle, desc, a, out);
}
__global__ void kernel_with_printf(float* x) { cudaGetLastError(); }
void step() { cublasCreate(&h); }
"""

CALLER = """\
void train() {
    NvtxRange range("step");
    // matmul_cublaslt(out, a) in a comment
    matmul_cublaslt(out, a);
    cublasCheck(other_status());
    const char* name = "matmul_cublaslt";
    obj.matmul_cublaslt(1);
    step();
}
"""


def cxx(code: str, name: str = "k.cuh"):
    return CxxScanner().scan(SourceFile(name, code.encode("utf-8")))


def test_wrapper_definitions_name_what_they_wrap():
    definitions = {(f.location.line, f.symbol): f for f in cxx(HEADER) if f.rule_id == "AP4190" and "port it once" in f.message}
    assert set(definitions) == {
        (3, "CUBLAS_LOWP"),
        (4, "cublasCheck_"),
        (7, "cublasCheck"),  # a macro over the function wrapper is a wrapper too
        (10, "NvtxRange"),
        (13, "matmul_cublaslt"),
        (17, "step"),
    }  # not the kernel: kernels are launched, not wrappers of a host library
    assert "cuBLAS" in definitions[(13, "matmul_cublaslt")].message and "cublasLtMatmul" in definitions[(13, "matmul_cublaslt")].message
    assert definitions[(13, "matmul_cublaslt")].family == "cublas"
    assert definitions[(10, "NvtxRange")].family == "nvtx"


def test_a_macro_body_comment_is_not_scanned():
    lines = {f.location.line: f.symbol for f in cxx(HEADER) if f.rule_id != "AP4190" and f.location.line == 3}
    assert lines == {3: "CUDA_R_16BF"}  # cudaFree in the trailing comment is not a use


def test_wrapper_uses_in_the_same_file_and_in_macro_bodies():
    findings = [f for f in cxx(HEADER + CALLER) if f.rule_id == "AP4190" and "defined at" in f.message]
    sites = {(f.location.line, f.symbol) for f in findings}
    offset = HEADER.count("\n")
    assert (7, "cublasCheck_") in sites  # the macro forwards to the function wrapper
    assert {(offset + 2, "NvtxRange"), (offset + 4, "matmul_cublaslt"), (offset + 5, "cublasCheck"), (offset + 8, "step")} <= sites
    assert not {line for line, _ in sites} & {offset + 3, offset + 6, offset + 7}  # comment, string, member call
    use = next(f for f in findings if f.symbol == "matmul_cublaslt")
    assert use.message.endswith("defined at k.cuh:13")


def test_wrappers_are_linked_across_files_by_distinct_name(tmp_path: Path):
    (tmp_path / "llmc").mkdir()
    (tmp_path / "llmc" / "matmul.cuh").write_text(HEADER)
    (tmp_path / "train.cu").write_text(CALLER)  # includes nothing: relies on its includer, as llm.c's headers do
    findings = scan([str(tmp_path)], jobs=1).findings
    uses = {(f.location.line, f.symbol): f for f in findings if f.rule_id == "AP4190" and f.location.path.endswith("train.cu")}
    assert set(uses) == {(2, "NvtxRange"), (4, "matmul_cublaslt"), (5, "cublasCheck")}  # `step` is too common a name to follow
    assert uses[(4, "matmul_cublaslt")].message.endswith("matmul.cuh:13")
    assert uses[(4, "matmul_cublaslt")].family == "cublas"


def test_a_line_already_naming_a_cuda_api_gets_no_wrapper_finding():
    code = HEADER + "void f() {\n    cublasCheck(cublasCreate(&h));\n}\n"
    last = HEADER.count("\n") + 2
    assert [f.rule_id for f in cxx(code) if f.location.line == last] == ["AP4101"]


def test_version_macros_namespaces_headers_and_stable_registrations():
    code = """\
#include <cuda_profiler_api.h>
#include <nvtx3/nvToolsExtCudaRt.h>
#include <ATen/cudnn/Handle.h>
#include <cuda/ptx>
#if CUBLAS_VERSION >= 11000 && CUDNN_VERSION >= 8500
int y;
#endif
void f() {
  auto& allocator = *::c10::cuda::CUDACachingAllocator::get();
  try { } catch (cudnn_frontend::cudnnException e) { }
}
STABLE_TORCH_LIBRARY_IMPL(ops, CUDA, m) { m.impl("fwd", &fwd); }
"""
    found = {(f.location.line, f.rule_id, f.symbol) for f in cxx(code, "k.cpp")}
    assert {
        (1, "AP2010", "cuda_profiler_api.h"),
        (2, "AP4010", "nvtx3/nvToolsExtCudaRt.h"),
        (3, "AP1910", "ATen/cudnn/Handle.h"),
        (4, "AP5010", "cuda/ptx"),
        (5, "AP4101", "CUBLAS_VERSION"),
        (5, "AP4102", "CUDNN_VERSION"),
        (9, "AP1901", "c10::cuda::CUDACachingAllocator::get"),
        (10, "AP4102", "cudnn_frontend::cudnnException"),
        (12, "AP1902", "CUDA dispatch key"),
    } <= found


def test_a_device_template_string_is_reported_outside_device_positions_once(scan_code):
    found = scan_code(
        """
        import torch
        def name(i):
            return 'cuda:{}'.format(i)
        x = torch.ones(1, device="cuda:%d" % 0)
        """
    )
    assert [(rule, line) for rule, line, _symbol in found] == [("AP1002", 4), ("AP1002", 5)]


def test_more_torch_cuda_helpers_are_catalogued(scan_code):
    found = scan_code(
        """
        import torch
        from torch.testing._internal.common_utils import TEST_CUDA
        from torch.testing._internal.common_distributed import requires_nccl
        from torch.utils.cpp_extension import _join_cuda_home, _is_cuda_file
        y = torch.ops.cudnn.layer_norm(x)
        """
    )
    rules = {(rule, line) for rule, line, _symbol in found}
    assert {("AP1113", 3), ("AP9001", 4), ("AP6002", 5), ("AP6001", 5), ("AP1404", 6)} <= rules


def test_aten_cuda_names_outside_at_cuda_and_version_tests_in_split_conditionals():
    code = """\
void f() { auto gen = at::get_generator_or_default<at::CUDAGeneratorImpl>(g, d); }
#if CUDNN_FRONTEND_MAJOR_VERSION > 1
void g() {
#else
void g(int x) {
#endif
}
"""
    found = {(f.location.line, f.rule_id, f.symbol) for f in cxx(code, "k.cpp")}
    assert (1, "AP1901", "at::CUDAGeneratorImpl") in found
    assert (2, "AP4102", "CUDNN_FRONTEND_MAJOR_VERSION") in found


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed: tracked files cannot be told from ignored ones")
def test_gitignore_does_not_hide_files_git_tracks(tmp_path: Path):
    (tmp_path / ".gitignore").write_text("*.cuh\nbuild/\n")
    (tmp_path / "kernels.cuh").write_text("void f(float* p) { cudaFree(p); }\n")
    (tmp_path / "untracked.cuh").write_text("void g(float* p) { cudaFree(p); }\n")
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "gen.cu").write_text("void h(float* p) { cudaFree(p); }\n")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "add", "-f", "kernels.cuh"], check=True)
    paths = {Path(f.location.path).name for f in scan([str(tmp_path)], jobs=1).findings}
    assert paths == {"kernels.cuh"}  # tracked despite `*.cuh`; the untracked ones stay ignored
