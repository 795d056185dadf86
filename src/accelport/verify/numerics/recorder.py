"""The per-op path of `accelport dump` in statistics mode, compiled from _recorder.c at first use.

In a training step the capture's Python per dispatched op (finding the phase and module,
looking up and describing the inputs, measuring the outputs, the source line, the call
index and the arguments) cost about as much as reading every new tensor: ~10 ms a step
for a 4-layer transformer on the CPU, spread over some 650 ops. The extension does the
same in C and calls the statistics kernel directly; `Capture._on_op` is the same path in
Python, the reference and the fallback, and the two write the same records
(tests/verify/test_recorder.py). It is built once per interpreter into the user's cache
folder by `accelport.native` and needs a C compiler, Python's headers and the compiled
statistics kernel (native.py); without them, or with ACCELPORT_DUMP_RECORDER=0 (or
ACCELPORT_NATIVE=0), `load()` returns None and the capture runs in Python.
"""

from __future__ import annotations

import ctypes
import logging
import os
import zlib
from pathlib import Path
from typing import Any

from accelport import native
from accelport.verify.numerics import dump_ops, recorder_fields
from accelport.verify.numerics import native as stats_native

log = logging.getLogger(__name__)

ENV_VAR = "ACCELPORT_DUMP_RECORDER"
SOURCE = Path(__file__).with_name("_recorder.c")
# Every file of the build: SOURCE and the parts it #includes. The cache key covers them all
# (native.py hashes SOURCE alone), so a change to any part rebuilds the extension.
PARTS = (SOURCE, SOURCE.with_name("_recorder_fields.h"), SOURCE.with_name("_recorder_describe.c"))
_VERSION = 2


def load() -> Any:
    """The set-up extension module, building it on the first call; None when it is unavailable."""
    return _once.get()


def reset() -> None:
    """Forget the loaded module (tests use it to exercise the fallback)."""
    _once.reset()


def _load() -> Any:
    kernels = stats_native.kernels()
    if kernels is None:
        raise RuntimeError("no compiled statistics kernel")
    include = native.python_include()
    if include is None:
        raise RuntimeError("Python's headers (Python.h) are not installed")
    attempts = [[["-O2", "-shared", "-fPIC", "-fno-strict-aliasing", f"-I{include}", "-o", "{out}", "{src}"]]]
    parts = tuple(f"{path.name}:{zlib.crc32(path.read_bytes()):08x}" for path in PARTS[1:])
    module = native.load_extension("accelport.verify._recorder", SOURCE, attempts, key=(include, *parts))
    if module.version() != _VERSION:
        raise RuntimeError(f"{SOURCE.name}: unexpected version {module.version()}")
    module.setup(_config(kernels))
    return module


def _config(kernels: stats_native.Kernels) -> dict[str, Any]:
    import torch

    config: dict[str, Any] = {
        "fields": recorder_fields.table(),
        "tensor": torch.Tensor,
        "entry": dump_ops._Entry,
        "not_run": dump_ops._NOT_RUN,
        "strided": torch.strided,
        "dtype_names": dump_ops._DTYPE_NAMES,
        "graph_task_id": torch._C._current_graph_task_id,
        "autograd_node": torch._C._current_autograd_node,
        "grad_enabled": torch._C.is_grad_enabled,
        "num_threads": torch.get_num_threads,
        "getcwd": os.getcwd,
        "op_info": dump_ops._op_info,
        "dtype_name": dump_ops._dtype_name,
        "json_stats": dump_ops._json_stats,
        "arg_json": dump_ops._arg_json_at,
        "float32": torch.float32,
        "float64": torch.float64,
        "bfloat16": torch.bfloat16,
        "parallel_min": stats_native.PARALLEL_MIN,
        "openmp": kernels.openmp,
    }
    for dtype in ("float32", "float64", "bfloat16"):
        config[f"sweep_{dtype}"] = ctypes.cast(kernels.by_dtype[dtype], ctypes.c_void_p).value
        config[f"par_{dtype}"] = ctypes.cast(kernels.parallel_by_dtype[dtype], ctypes.c_void_p).value
    return config


_once: native.Once[Any] = native.Once(
    lambda: _load(), log, "dump: compiled recorder unavailable (%s); recording in Python", ENV_VAR, stats_native.ENV_VAR
)
