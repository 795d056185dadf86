"""benchmarks/recall.py's own oracle: which grep hits are live code, how they are classified, and how they meet findings."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("recall", REPO / "benchmarks" / "recall.py")
recall = importlib.util.module_from_spec(_spec)
sys.modules["recall"] = recall
_spec.loader.exec_module(recall)


def hits(oracle) -> list[tuple[int, str, str]]:
    return [(h.line, h.word, h.kind) for h in oracle.hits]


# --------------------------------------------------------------------------- Python


def test_python_comments_docstrings_and_messages_are_inert_but_device_values_are_live():
    source = '''"""Runs on cuda when torch.cuda is there."""
import torch  # cuda
x = torch.ones(2, device="cuda:0")
print("moving to cuda now")
backend = "nccl"
os.environ["CUDA_VISIBLE_DEVICES"] = "0"
os.environ["DS_SKIP_CUDA_CHECK"] = "1"
'''
    oracle = recall.python_oracle("a.py", source)
    assert hits(oracle) == [(3, "cuda:0", "real"), (5, "nccl", "real"), (6, "CUDA_VISIBLE_DEVICES", "real")]
    assert oracle.inert_hits == 5  # docstring (2), comment, message, a project's own variable


def test_python_fstring_fields_are_code_and_their_literal_parts_are_not():
    source = 'device = f"cuda:{rank}"\nprint(f"peak {torch.cuda.max_memory_allocated()} on cuda")\n'
    oracle = recall.python_oracle("a.py", source)
    assert hits(oracle) == [(1, "cuda:", "real"), (2, "cuda", "real")]
    assert oracle.inert_hits == 1  # "on cuda"


def test_python_names_are_classified_real_or_identifier():
    source = """import torch
from torch.utils.cpp_extension import CUDA_HOME
from torchao.kernels import mxfp8_quantize_cuda
from .cuda_layer_norm import CUDAFPLN
import fused_layer_norm_cuda as fln
v = torch.version.cuda.split(".")
ok = x.is_cuda
nccl_init_method = "tcp://"
is_cuda = True
kind = ProfilerActivity.CUDA
choice = KernelChoice.CUDA
home = CUDA_HOME
y = fln.forward(x)
"""
    oracle = recall.python_oracle("a.py", source, project=frozenset({"torchao"}))
    assert hits(oracle) == [
        (2, "CUDA_HOME", "real"),
        (3, "mxfp8_quantize_cuda", "identifier"),  # the project's own module
        (4, "cuda_layer_norm", "identifier"),  # relative import
        (4, "CUDAFPLN", "identifier"),
        (5, "fused_layer_norm_cuda", "real"),  # a compiled CUDA extension
        (6, "cuda", "real"),
        (7, "is_cuda", "real"),
        (8, "nccl_init_method", "identifier"),
        (9, "is_cuda", "identifier"),
        (10, "CUDA", "real"),
        (11, "CUDA", "identifier"),  # a project enum's member
        (12, "CUDA_HOME", "real"),
    ]


def test_untokenizable_python_is_noted_not_guessed():
    oracle = recall.python_oracle("a.py", 'x = """never closed\ncuda\n')
    assert oracle.error is not None and oracle.hits == []


# --------------------------------------------------------------------------- C, C++, CUDA


def test_cxx_lexer_blanks_comments_strings_and_dead_groups_keeping_lengths_and_includes():
    source = """#include <cuda_runtime.h>
#include "my_cuda_utils.h"
// cudaMalloc(&p, 4);
/* cudaFree(p);
   still a comment */
const char* s = "cudaMemcpy";
char c = 'c'; int n = 1'000;
auto r = R"x(cudaDeviceReset())x";
#define LONG_COMMENT // cudaSetDevice \\
   cudaStreamCreate continues the comment
#if 0
cudaDeviceSynchronize();
#if 1
cudaEventCreate(&e);
#endif
#else
cudaGetLastError();
#endif
cudaStreamSynchronize(s);
"""
    live, _blanked = recall.cxx_live_text(source)
    assert len(live) == len(source) and live.count("\n") == source.count("\n")
    words = set(recall._WORD.findall(live))
    assert {"cuda_runtime", "my_cuda_utils", "cudaGetLastError", "cudaStreamSynchronize"} <= words
    assert not words & {"cudaMalloc", "cudaFree", "cudaMemcpy", "cudaDeviceReset", "cudaSetDevice", "cudaStreamCreate"}
    assert not words & {"cudaDeviceSynchronize", "cudaEventCreate"}  # the whole #if 0 group, nested #if included


def test_cxx_wrappers_are_project_definitions_that_call_a_cuda_c_api():
    source = """#define cublasCheck(s) { cublasCheck_((s), __FILE__, __LINE__); }
#define CUBLAS_LOWP CUDA_R_16BF
#define ENABLE_CUDNN 1
void cublasCheck_(cublasStatus_t s, const char* f, int l) { if (s) printf("%s", cublasGetStatusString(s)); }
void launch_cuda(float* x) { auto st = at::cuda::getCurrentCUDAStream(); kernel<<<1, 1, 0, st>>>(x); }
"""
    wrappers, defined = recall.cxx_wrappers(recall.cxx_live_text(source)[0])
    # cublasCheck forwards to a library-named call; launch_cuda only to PyTorch's C++ API and a kernel.
    assert wrappers == {"CUBLAS_LOWP", "cublasCheck_", "cublasCheck"}
    assert {"ENABLE_CUDNN", "launch_cuda"} <= defined
    oracle = recall.cxx_oracle("k.cu", source + "ENABLE_CUDNN; launch_cuda(x); CUBLAS_LOWP;\n", wrappers, defined, set())
    assert [(h.word, h.kind) for h in oracle.hits if h.line == 6] == [
        ("ENABLE_CUDNN", "identifier"),
        ("launch_cuda", "identifier"),
        ("CUBLAS_LOWP", "real"),
    ]


def test_cxx_project_headers_are_other_and_system_headers_real():
    source = '#include "cuda_utils.h"\n#include <cuda_fp16.h>\n'
    oracle = recall.cxx_oracle("k.cu", source, set(), set(), {"cuda_utils.h"})
    assert [(h.line, h.kind) for h in oracle.hits] == [(1, "other"), (2, "real")]


# --------------------------------------------------------------------------- against the inventory


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text(
        "import torch\n"
        "# torch.cuda in a comment\n"
        "torch.cuda.synchronize()\n"
        "t = torch\n"
        "t.cuda.synchronize()\n"  # through an assignment: a documented limit of the inventory
        "use_cuda_graph = False\n"
    )
    (tmp_path / "k.cu").write_text("// cudaFree(p)\nvoid f(float* p) {\n  cudaFree(p);\n}\n")
    return tmp_path


def test_measure_counts_coverage_misses_and_identifiers(tree: Path):
    row = recall.measure(tree, jobs=1, show_misses=True)
    assert (row["live_hit_lines"], row["real_use"], row["identifier_only"]) == (3 + 1, 3, 1)
    assert row["real_use_covered"] == 2  # torch.cuda.synchronize, cudaFree
    assert row["misses"] == ["train.py:5: [cuda] t.cuda.synchronize()"]
    assert row["false_positives_in_comments_strings"] == 0
    assert row["inert_hits"] == 2


def test_the_script_prints_json_and_the_table_and_refuses_a_missing_tree(tree: Path):
    subprocess_env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    script = [sys.executable, str(REPO / "benchmarks" / "recall.py")]
    done = subprocess.run([*script, str(tree), "--jobs", "1"], capture_output=True, text=True, env=subprocess_env, check=False)
    assert done.returncode == 0, done.stderr
    [row] = json.loads(done.stdout)["trees"]
    assert row["real_use_recall"] == 0.6667 and row["misses"] == 1
    table = subprocess.run([*script, str(tree), "--table", "--jobs", "1"], capture_output=True, text=True, env=subprocess_env, check=False)
    assert table.stdout.splitlines()[2].startswith(f"| {tree.name} |") and "66.67%" in table.stdout
    missing = subprocess.run([*script, str(tree / "nope")], capture_output=True, text=True, env=subprocess_env, check=False)
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "nope" in missing.stderr
