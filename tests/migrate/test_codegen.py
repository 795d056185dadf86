"""migrate's quick libcst code generation writes exactly what libcst's own `Module.code` writes."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest

from accelport.migrate import edits

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "legacy_cuda_app"
TRICKY = '''\
@decorator(x=1)
async def f(a, /, b=2, *args, c: int = 3, **kw) -> "T":
    async with lock as (x, y):
        yield from g()
    return [i for i in range(3) if i] or {k: v for k, v in d.items()}  # comment
class C(Base, metaclass=M):
    """doc"""
    x: int = 1 if y else 2
    def g(self): return lambda q=0: q ** 2
try:
    pass
except (A, B) as e:
    raise X from e
finally:
    del z
match p:
    case [1, *rest] if rest:
        print(f"{p!r:>10}", end='')
'''


def test_the_quick_state_is_in_use_with_this_libcst():
    assert edits._QUICK, "libcst's private codegen API changed: migrate fell back to the public one"


@pytest.mark.parametrize("source", [TRICKY, "x = 1\r\ny = 2\r\n", "if a:\n\tb = 1\n", *(p.read_text() for p in sorted(EXAMPLE.glob("*.py")))])
def test_generated_code_equals_libcst_output(source):
    module = cst.parse_module(source)
    assert edits.module_code(module) == module.code == source
    for statement in module.body:
        assert edits.code(statement) == cst.Module(body=[]).code_for_node(statement)
