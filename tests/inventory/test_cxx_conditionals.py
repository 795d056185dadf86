"""An #if/#else that splits a kernel body (each branch opens a brace the other closes) is still scanned."""

from __future__ import annotations

import pytest

from accelport.inventory.base import ScanSkipped, SourceFile
from accelport.inventory.cxx import CxxScanner

SPLIT = """\
#include <cuda_runtime.h>
__global__ void k(float *x, int n) {
  int i = threadIdx.x;
#if __CUDA_ARCH__ >= 700 /* CUDART_VERSION in a comment */
  if (i < n) {
    x[i] = __shfl_down_sync(0xffffffff, x[i], 1);
    const char *s = "#endif in a string";
#elif USE_ATOMIC
  if (i < n && i > 0) {
    x[i] = atomicAdd(&x[0], 1.0f);
/* #else in a comment
#endif */
#else
  while (i < n) {
    x[i] = __ldg(&x[i]);
    i += cudaMemcpyDefault;
#endif
  }
}
void host(float *x) {
  cudaMalloc(&x, 4);
  k<<<1, 64>>>(x, 4);
}
"""


def scan(code: str, name: str = "k.cu"):
    return CxxScanner().scan(SourceFile(name, code.encode("utf-8")))


def test_split_kernel_body_is_scanned_in_every_branch():
    found = {(f.rule_id, f.location.line, f.symbol) for f in scan(SPLIT)}
    expected = {
        ("AP2010", 1, "cuda_runtime.h"),
        ("AP5001", 2, "k"),
        ("AP5009", 4, "__CUDA_ARCH__"),  # the condition of the split #if
        ("AP5005", 6, "__shfl_down_sync"),  # first branch
        ("AP9101", 6, "__shfl_down_sync"),
        ("AP5006", 10, "atomicAdd"),  # the #elif branch
        ("AP5011", 15, "__ldg"),  # the #else branch
        ("AP2002", 16, "cudaMemcpyDefault"),
        ("AP4190", 20, "host"),  # host() calls the CUDA runtime: a wrapper its callers depend on
        ("AP2001", 21, "cudaMalloc"),  # after the split function
        ("AP5003", 22, "k"),
    }
    assert found == expected


def test_split_kernel_keeps_columns_and_snippets_of_the_file():
    [atomic] = [f for f in scan(SPLIT) if f.rule_id == "AP5006"]
    assert (atomic.location.line, atomic.location.column) == (10, 12)
    assert atomic.snippet == "x[i] = atomicAdd(&x[0], 1.0f);"


def test_garbage_in_one_branch_is_still_skipped():
    with pytest.raises(ScanSkipped, match="syntax errors cover"):
        scan("#if X\n" + ")))) ]]] <<<>>> }}}}}} cudaMalloc {{{ ((( \x01 " * 20 + "\n#else\n}}}} ((((\n#endif\n")
