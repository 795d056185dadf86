"""The kernel lint: constructs that break on Triton 3.9, under the interpreter, or off NVIDIA."""

from __future__ import annotations

import pytest

from accelport.errors import UserError
from accelport.kernels.lint import lint_package, lint_paths, lint_source

KERNEL = "from accelport.kernels.tl_compat import tl, triton\n\n@triton.jit\ndef k(x_ptr):\n    {body}\n"


def test_the_operator_library_is_clean():
    assert lint_package() == []


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ("p = tl.make_block_ptr(x_ptr, (1,), (1,), (0,), (16,), (0,))", "KL001"),
        ("p = tl.advance(p, (16,))", "KL001"),
        ("y = tl.extra.cuda.libdevice.tanh(x)", "KL002"),
        ("y = tl.inline_asm_elementwise('mov.b32 $0, $1;', '=r,r', [x], dtype=tl.int32, is_pure=True, pack=1)", "KL003"),
        ("acc = tl.dot(a, b, acc)", "KL004"),
    ],
)
def test_banned_constructs_are_found(body, code):
    assert [f.code for f in lint_source(KERNEL.format(body=body), "k.py")] == [code]


def test_imports_are_checked():
    assert [f.code for f in lint_source("from triton.language.extra import libdevice\n", "k.py")] == ["KL002"]
    kernel_module = "import triton\n\n@triton.jit\ndef k(x):\n    pass\n"
    assert [f.code for f in lint_source(kernel_module, "k.py")] == ["KL005"]
    assert lint_source("import triton\nprint(triton.__version__)\n", "host.py") == []  # host code may import triton
    assert [f.code for f in lint_source("import triton\n\n@triton.autotune(configs=[], key=[])\n@triton.jit\ndef k(x):\n    pass\n", "k.py")] == ["KL005", "KL006"]


def test_near_misses_are_not_findings():
    body = 'acc = tl_compat.dot(a, b, acc)  # not tl.make_block_ptr, not libdevice\n    s = "tl.dot and inline_asm_elementwise"'
    assert lint_source(KERNEL.format(body=body), "k.py") == []
    assert lint_source("acc = tl.dot(a, b)\n", "tl_compat.py") == []  # the compat module is where tl.dot belongs


def test_unparsable_file_is_a_user_error(tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("def k(:\n")
    with pytest.raises(UserError, match=r"broken\.py: cannot parse"):
        lint_paths([broken])
