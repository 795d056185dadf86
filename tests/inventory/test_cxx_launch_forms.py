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
