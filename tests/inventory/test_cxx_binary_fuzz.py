"""Fuzz: random bytes and token soup to the C/C++/CUDA scanner, random and truncated ELF files to the binary scanner.

Every file must come back scanned (findings, possibly none) or skipped with a reason: never an exception.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accelport.inventory.engine import scan_file
from accelport.inventory.scanners import all_scanners, scanner_for
from accelport.source.walk import Candidate

TOKENS = [
    "__global__", "__device__", "__host__", "__shared__", "__managed__", "template", "<", ">", "<<<", ">>>", "(", ")",
    "{", "}", "[", "]", ";", ",", "::", "&", "|", "/", "%", ">>", "31", "32", "0xffffffff", "5", "double", "float",
    "int", "void", "k", "x", "threadIdx.x", "cudaMalloc", "cudaStream_t", "cublasSgemm", "ncclAllReduce",
    "__shfl_down_sync", "atomicAdd", "thrust::sort", "at::cuda::getCurrentCUDAStream", "asm", "volatile",
    '"mov.u32 %0, %%laneid;"', "#include <cuda.h>\n", "#define WARP_SIZE 32\n", "#if __CUDA_ARCH__ >= 800\n",
    "#endif\n", "//", "/*", "*/", '"', "'", "\\", "\n", " ", "PYBIND11_MODULE", "m.def", "TORCH_LIBRARY_IMPL",
    "R\"(", ")\"", "\u00e9", "\t",
]

SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def run(tmp_path: Path, name: str, data: bytes):
    path = tmp_path / name
    path.write_bytes(data)
    scanner = scanner_for(name)
    candidate = Candidate(str(path), name, all_scanners().index(scanner), len(data))
    result = scan_file(candidate)
    assert result.skipped is None or result.skipped, "a skip must carry a reason"
    assert "internal error" not in (result.skipped or ""), result.skipped
    return result


@SETTINGS
@given(data=st.binary(max_size=2000), suffix=st.sampled_from([".cu", ".cuh", ".cpp", ".h"]))
def test_random_bytes_to_the_cxx_scanner(tmp_path, data, suffix):
    run(tmp_path, "fuzz" + suffix, data)


@SETTINGS
@given(tokens=st.lists(st.sampled_from(TOKENS), max_size=300))
def test_token_soup_to_the_cxx_scanner(tmp_path, tokens):
    result = run(tmp_path, "soup.cu", " ".join(tokens).encode("utf-8"))
    for finding in result.findings:
        assert finding.location.line >= 1 and finding.location.column >= 1


@SETTINGS
@given(data=st.binary(max_size=4000), name=st.sampled_from(["libx.so", "liby.so.12", "k.o", "k.cubin", "w-1.0-py3-none-any.whl"]))
def test_random_bytes_named_as_binaries(tmp_path, data, name):
    run(tmp_path, name, data)


@SETTINGS
@given(data=st.binary(min_size=0, max_size=400))
def test_random_bytes_behind_an_elf_header(tmp_path, data):
    run(tmp_path, "libz.so", b"\x7fELF\x02\x01\x01" + data)


def test_every_truncation_of_a_real_elf_is_scanned_or_skipped(tmp_path):
    gcc = shutil.which("gcc")
    if gcc is None:
        import pytest

        pytest.skip("gcc is not installed: the ELF is compiled at test time")
    (tmp_path / "u.c").write_text("extern int cudaMalloc(void**, unsigned long);\nint f(void** p) { return cudaMalloc(p, 4); }\n")
    subprocess.run([gcc, "-shared", "-fPIC", "-o", "libu.so", "u.c"], cwd=tmp_path, check=True, capture_output=True, timeout=60)
    data = (tmp_path / "libu.so").read_bytes()
    outcomes = {"scanned": 0, "skipped": 0}
    for cut in range(0, len(data), max(1, len(data) // 300)):
        result = run(tmp_path, "libcut.so", data[:cut])
        outcomes["skipped" if result.skipped else "scanned"] += 1
    assert outcomes["skipped"] > 0
    assert run(tmp_path, "libfull.so", data).skipped is None


BUILD_TOKENS = [
    "project(", "enable_language(CUDA)", "find_package(CUDAToolkit)", "set(", "CMAKE_CUDA_ARCHITECTURES", ")", "(",
    "#[[", "]]", "[=[", "]=]", '"', "\\", "\n", " ", "\t", "#", "FROM", "nvidia/cuda:12.1", "RUN", "ENV", "CUDA_HOME=",
    "pip", "install", "torch==2.1+cu121", "--extra-index-url", "https://download.pytorch.org/whl/cu121", "nvcc",
    "-arch=sm_80", "-lcudart", "dependencies:", "- pip:", "  - ", "cudatoolkit=11.8", "channels:", "nvidia", ":", "=",
    "[project]", "dependencies = [", "]", "'", "flash-attn", "$(NVCC)", "&&", "-gencode", "[options]", "install_requires =",
]


@SETTINGS
@given(
    tokens=st.lists(st.sampled_from(BUILD_TOKENS), max_size=120),
    name=st.sampled_from(["CMakeLists.txt", "Makefile", "Dockerfile", "requirements.txt", "environment.yml", "pyproject.toml", "setup.cfg", "setup.py"]),
)
def test_token_soup_to_build_and_manifest_scanners(tmp_path, tokens, name):
    run(tmp_path, name, " ".join(tokens).encode("utf-8"))
