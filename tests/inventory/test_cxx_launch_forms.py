"""Kernel launches in the forms real code writes them: inside #define bodies, with template arguments."""

from __future__ import annotations

from accelport.inventory.base import SourceFile
from accelport.inventory.cxx import CxxScanner


def scan(code: str, name: str = "k.cu"):
    return CxxScanner().scan(SourceFile(name, code.encode("utf-8")))


def launches(code: str):
    return [(f.location.line, f.location.column, f.symbol) for f in scan(code) if f.rule_id == "AP5003"]


MACROS = """\
__global__ void k(float *x, int n) { x[0] = n; }
#define LAUNCH(g, b) k<<<g, b>>>(x, n)
#define LAUNCH_SPLIT(n, s) \\
  do { \\
    k<<<(n + 255) / 256, 256, 0, s>>>(x, \\
        n); \\
  } while (0)
// #define IN_A_COMMENT k<<<1, 2>>>(x, n)
/* #define IN_A_BLOCK_COMMENT k<<<1, 2>>>(x, n) */
#define IN_A_STRING "k<<<1, 2>>>(x, n)"
#define SHIFTS(a) ((a) << 3) >> 1
#define ONE_WARP k<<<1, 32>>>(x, n)
void host(float *x, int n) { LAUNCH(1, 64); }
"""


def test_launches_inside_macro_bodies_are_found_at_their_place():
    assert launches(MACROS) == [(2, 22, "k"), (5, 5, "k"), (12, 18, "k")]


def test_macro_launch_names_its_macro_and_keeps_the_configuration():
    found = {f.location.line: f for f in scan(MACROS) if f.rule_id == "AP5003"}
    assert found[2].message == "kernel launch k<<<g, b>>> in macro LAUNCH"
    assert found[5].message == "kernel launch k<<<(n + 255) / 256, 256, 0, s>>> in macro LAUNCH_SPLIT"
    assert found[5].snippet.startswith("k<<<(n + 255) / 256, 256, 0, s>>>(x,")


def test_macro_launches_count_toward_the_kernel_and_its_hazards():
    findings = scan(MACROS)
    [kernel] = [f for f in findings if f.rule_id == "AP5001"]
    assert "launched 3× in this file" in kernel.message
    assert [(f.location.line, f.location.column) for f in findings if f.rule_id == "AP9103"] == [(12, 25)]


def test_comment_and_string_near_misses_in_macros_are_not_launches():
    code = (
        "// #define A k<<<1, 2>>>(x)\n"
        "/* #define B k<<<1, 2>>>(x) */\n"
        '#define C "k<<<1, 2>>>(x)"\n'
        "#define D(a) ((a) << 3)\n"
        "#define E(a) ((a) <<< 3)\n"
    )
    assert launches(code) == []


TEMPLATES = """\
namespace ops {
template <typename T, int N> __global__ void k(T* x) { x[0] = N; }
}
void host(float* x, cudaStream_t s) {
  ops::k<float, 4><<<1, 64, 0, s>>>(x);
  ops::k<
      double,
      8><<<1, 64>>>(reinterpret_cast<double*>(x));
  ops::k<float, 4><<<1, 32>>>(x);
}
"""


def test_launch_symbol_keeps_template_arguments_and_counts_by_kernel_name():
    findings = scan(TEMPLATES)
    assert [(f.symbol, f.location.line) for f in findings if f.rule_id == "AP5003"] == [
        ("ops::k<float, 4>", 5),
        ("ops::k<double, 8>", 6),
        ("ops::k<float, 4>", 9),
    ]
    [first] = [f for f in findings if f.rule_id == "AP5003" and f.location.line == 5]
    assert first.message == "kernel launch ops::k<float, 4><<<1, 64, 0, s>>>"
    [warp] = [f for f in findings if f.rule_id == "AP9103"]
    assert warp.symbol == "ops::k<float, 4>"
    [kernel] = [f for f in findings if f.rule_id == "AP5001"]
    assert "launched 3× in this file" in kernel.message


def test_template_launches_link_to_a_kernel_defined_in_another_file(tmp_path):
    from accelport.inventory import scan as scan_tree

    (tmp_path / "k.cuh").write_text("template <int B> __global__ void tiled(float* x) { x[0] = B; }\n")
    (tmp_path / "a.cu").write_text('#include "k.cuh"\nvoid a(float* x) { tiled<128><<<1, 128>>>(x); }\n')
    report = scan_tree([str(tmp_path)], jobs=1)
    [kernel] = [f for f in report.findings if f.rule_id == "AP5001"]
    assert "launched 1× by name (0 in this file, 1 elsewhere" in kernel.message
    assert [f.symbol for f in report.findings if f.rule_id == "AP5003"] == ["tiled<128>"]
