"""Kernel tests run Triton under its interpreter on CPU tensors.

Triton fixes interpreter mode when it is imported (its standard library is
decorated then), so TRITON_INTERPRET=1 must be in the environment before any
test imports triton; pytest imports this file before the kernel test modules.
The ahead-of-time compile check needs the opposite mode, so it runs in child
processes, started when the first kernel test starts and collected at the end
(`aot_check`), which puts the second core to work while the interpreter runs.
"""

from __future__ import annotations

import os
import sys

import pytest

from accelport.kernels import registry

if "triton" not in sys.modules:
    os.environ["TRITON_INTERPRET"] = "1"
registry.use_interpreter()  # a KernelError here means a test imported triton before this file ran

AOT_TARGETS = ("sm_90", "gfx942")
AOT_DTYPES = ("bfloat16",)


def pytest_collection_modifyitems(config, items):
    """Run the AOT tests after the other kernel tests, so their child processes overlap the interpreter."""
    here = os.path.dirname(__file__)
    late = [i for i in items if str(i.fspath).startswith(here) and i.get_closest_marker("aot")]
    for item in late:
        items.remove(item)
    items.extend(late)


def pytest_configure(config):
    config.addinivalue_line("markers", "aot: ahead-of-time compile checks (child processes, run last)")


@pytest.fixture(scope="session")
def aot_check():
    """The AOT compile check for sm_90 and gfx942 (bf16) over every operator, running in the background."""
    from accelport.kernels import aot

    check = aot.Check(aot.plan(registry.OPERATOR_NAMES, AOT_TARGETS, AOT_DTYPES), workers=1)
    yield check
    check.close()


@pytest.fixture(autouse=True, scope="session")
def _start_aot_early(request):
    """Start the background AOT check with the first kernel test (it takes about a minute of one core)."""
    if any(item.get_closest_marker("aot") for item in request.session.items):
        request.getfixturevalue("aot_check")
    yield
