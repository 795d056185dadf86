"""Build files: CMake, Makefiles, Dockerfiles and setup.py, with comment and free-text near misses."""

from __future__ import annotations

import pytest

from accelport.findings import Category
from accelport.inventory.base import ScanSkipped, SourceFile
from accelport.inventory.buildfiles import BuildFileScanner, SetupScriptScanner, cmake_commands


def rules(name: str, text: str, scanner=None) -> list[tuple[str, str, int]]:
    scanner = scanner or BuildFileScanner()
    findings = scanner.scan(SourceFile(name, text.encode()))
    assert all(f.category in (Category.BUILD, Category.DEPENDENCY, Category.FRAMEWORK_API, Category.SEMANTIC_HAZARD) for f in findings)
    return sorted((f.rule_id, f.symbol, f.location.line) for f in findings)


CMAKE = """\
cmake_minimum_required(VERSION 3.24)
# enable_language(CUDA) is only mentioned here
#[[ project(old LANGUAGES CUDA)
    find_package(CUDA) ]]
project(fused LANGUAGES CXX CUDA)
find_package(CUDAToolkit REQUIRED)
message(STATUS "CUDA::cublas and --use_fast_math are words in a message")
set(CMAKE_CUDA_ARCHITECTURES 80 90)
set(CMAKE_CUDA_FLAGS "${CMAKE_CUDA_FLAGS} --use_fast_math")
add_library(fused SHARED kernel.cu)
target_link_libraries(fused PRIVATE
  CUDA::cudart  # the runtime
  CUDA::cublas)
target_compile_options(fused PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr>)
set_target_properties(fused PROPERTIES CUDA_ARCHITECTURES "86")
"""


def test_cmake_positives_and_comment_near_misses():
    assert rules("CMakeLists.txt", CMAKE) == [
        ("AP6101", "project(... CUDA)", 5),
        ("AP6102", "CUDA::cublas", 13),
        ("AP6102", "CUDA::cudart", 12),
        ("AP6102", "find_package(CUDAToolkit)", 6),
        ("AP6103", "CMAKE_CUDA_ARCHITECTURES", 8),
        ("AP6103", "CUDA_ARCHITECTURES", 15),
        ("AP6104", "$<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr>", 14),
        ("AP6104", "CMAKE_CUDA_FLAGS", 9),
    ]


def test_cmake_without_cuda_has_no_findings():
    text = "project(plain LANGUAGES CXX)\nfind_package(Threads)\n# no CUDA here\nadd_library(x a.cpp)\n"
    assert rules("CMakeLists.txt", text) == []


def test_cmake_lexer_handles_bracket_arguments_quotes_and_nesting():
    commands = cmake_commands('set(A [=[ a ) "b" ]=])\nif((X AND Y))\nmessage("a \\" ) b")\n')
    assert [(c.name, [a.text for a in c.arguments]) for c in commands] == [
        ("set", ["A", ' a ) "b" ']),
        ("if", ["X", "AND", "Y"]),
        ("message", ['a \\" ) b']),
    ]


def test_makefile_nvcc_recipe_flags_and_links():
    text = """\
# nvcc -arch=sm_70 is mentioned in a comment only
CUDA_HOME ?= /usr/local/cuda
NVCC := $(CUDA_HOME)/bin/nvcc
kernel.o: kernel.cu
\t$(NVCC) -O3 -arch=sm_80 --use_fast_math -c $< -o $@
app: main.o kernel.o
\tg++ $^ -o $@ -L$(CUDA_HOME)/lib64 -lcudart -lcublas
"""
    found = rules("Makefile", text)
    assert ("AP6108", "CUDA_HOME", 2) in found
    assert ("AP6105", "$(CUDA_HOME)/bin/nvcc", 3) in found
    assert ("AP6105", "$(NVCC)", 5) in found
    assert ("AP6103", "-arch=sm_80", 5) in found
    assert ("AP6104", "--use_fast_math", 5) in found
    assert ("AP6105", "-lcudart", 7) in found and ("AP6105", "-lcublas", 7) in found
    assert all(line != 1 for _, _, line in found)


def test_dockerfile_base_image_env_and_pip_installs():
    text = """\
# FROM nvidia/cuda:11.8.0-base is the old image
FROM nvidia/cuda:12.4.1-cudnn-devel-ubuntu22.04 AS build
ENV CUDA_HOME=/usr/local/cuda TORCH_CUDA_ARCH_LIST="8.0;9.0"
RUN apt-get update && apt-get install -y libnccl2 git \\
    && pip install --extra-index-url https://download.pytorch.org/whl/cu121 torch==2.5.1+cu121 flash-attn
RUN echo "FROM nvidia/cuda is not an instruction here"
FROM ubuntu:22.04
"""
    found = rules("Dockerfile", text)
    assert ("AP6106", "nvidia/cuda:12.4.1-cudnn-devel-ubuntu22.04", 2) in found
    assert ("AP6108", "CUDA_HOME", 3) in found
    assert ("AP6103", "TORCH_CUDA_ARCH_LIST", 3) in found
    assert ("AP6107", "libnccl2", 4) in found
    assert ("AP8103", "https://download.pytorch.org/whl/cu121", 4) in found
    assert ("AP8102", "torch==2.5.1+cu121", 4) in found
    assert ("AP8104", "flash-attn", 4) in found
    assert not any(rule == "AP6106" and line in (1, 6, 7) for rule, _, line in found)


SETUP = '''\
"""Build with nvcc -gencode=arch=compute_70,code=sm_70 (docstring, not a flag)."""
import os
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "8.0;9.0")
# extra_compile_args={"nvcc": ["--use_fast_math"]} in a comment
setup(
    name="ext",
    ext_modules=[CUDAExtension("ext", ["k.cu"], extra_compile_args={"cxx": ["-O3"], "nvcc": ["-O3", "--use_fast_math", "-gencode=arch=compute_80,code=sm_80"]})],
    cmdclass={"build_ext": BuildExtension},
)
'''


def test_setup_py_keeps_python_findings_and_adds_nvcc_flags_and_arch_lists():
    found = rules("setup.py", SETUP, SetupScriptScanner())
    assert ("AP6103", "TORCH_CUDA_ARCH_LIST", 6) in found
    assert ("AP6103", "-gencode=arch=compute_80,code=sm_80", 10) in found
    assert ("AP6104", "extra_compile_args['nvcc']", 10) in found
    assert any(rule == "AP6001" for rule, _, _ in found)  # the Python scanner's CUDAExtension rule
    assert not any(line in (1, 7) for _, _, line in found)


def test_setup_py_with_a_syntax_error_is_skipped():
    with pytest.raises(ScanSkipped):
        SetupScriptScanner().scan(SourceFile("setup.py", b"from torch.utils.cpp_extension import CUDAExtension\nsetup(\n"))


LINKS = '''\
from setuptools import Extension, setup
# libraries=["cudnn"] and extra_link_args=["-lnccl"] in a comment
setup(
    name="ext",
    description="links cublas and -lcufft (free text)",
    ext_modules=[
        Extension(
            "ext",
            ["ext.cpp"],
            libraries=["cublas", "m", "c10_cuda"],
            extra_link_args=["-lcudnn", "-l:libcudart.so.12", "-lpthread", "-Wl,-rpath,/opt/cuda/lib64", "-lcublasfake"],
        )
    ],
)
'''


def test_setup_py_extension_libraries_and_link_args_naming_cuda_libraries():
    scanner = SetupScriptScanner()
    findings = [f for f in scanner.scan(SourceFile("setup.py", LINKS.encode())) if f.rule_id == "AP6105"]
    assert [(f.symbol, f.location.line) for f in findings] == [
        ("cublas", 10),
        ("c10_cuda", 10),
        ("cudnn", 11),
        ("libcudart.so.12", 11),
    ]
    assert findings[0].message == "the extension links the cuBLAS / cuBLASLt library cublas (libraries)"
    assert findings[0].category is Category.BUILD
    assert "cuDNN" in findings[2].message and "extra_link_args" in findings[2].message


def test_setup_py_links_without_cuda_libraries_have_no_findings():
    code = 'from setuptools import Extension\nExtension("m", ["m.c"], libraries=["m", "z"], extra_link_args=["-lpthread"])\n'
    assert SetupScriptScanner().scan(SourceFile("setup.py", code.encode())) == []
