"""Migrated code runs where there is no accelerator: every rewrite that calls torch.accelerator is
guarded or goes through the generated helper module, because torch.accelerator raises without an accelerator."""

from __future__ import annotations

import sys
import tempfile
import textwrap
import types
import warnings
from pathlib import Path

import torch

from accelport.migrate import migrate_source
from accelport.migrate.helpers import module_text

ON_CPU = not torch.accelerator.is_available()


def load(source: str) -> types.ModuleType:
    """Migrate `source` and import the result as a module."""
    result = migrate_source(textwrap.dedent(source), "case.py")
    assert result.error is None
    assert "torch.cuda" not in result.migrated
    module = types.ModuleType("case")
    with tempfile.TemporaryDirectory() as folder:  # the helper module, beside the migrated code as migrate writes it
        (Path(folder) / "_accelport_compat.py").write_text(module_text())
        sys.path.insert(0, folder)
        try:
            exec(compile(result.migrated, "case.py", "exec"), module.__dict__)
        finally:
            sys.path.remove(folder)
    return module


def test_current_device_stream_and_device_context_run_on_the_cpu():
    module = load(
        """
        import torch


        def work(i):
            index = torch.cuda.current_device()
            side = torch.cuda.Stream()
            with torch.cuda.stream(side):
                y = torch.ones(3) * 2
            torch.cuda.current_stream().wait_stream(side)
            torch.cuda.current_stream().synchronize()
            with torch.cuda.device(i):
                y = y + index
            here = torch.device("cuda", torch.cuda.current_device())
            return y, here
        """
    )
    y, here = module.work(1)
    assert y.tolist() == [2.0, 2.0, 2.0]
    assert here.type == module.DEVICE.type
    if ON_CPU:
        assert here == torch.device("cpu", 0)


def test_golden_torch_cuda_case_runs_on_the_cpu():
    from pathlib import Path

    source = (Path(__file__).parent / "data" / "golden" / "torch_cuda.input.py").read_text()
    module = load(source)
    assert module.setup(0) == 0
    model = torch.nn.Linear(2, 2)
    y, free, total, peak = module.step(model, torch.ones(1, 2))
    assert y.shape == (1, 2)
    if ON_CPU:
        assert (free, total, peak) == (0, 0, 0)
    assert module.timing() >= 0.0
    name, bf16 = module.rng()
    if ON_CPU:
        assert name == "cpu" and bf16 is False  # what torch.cuda.is_bf16_supported() says without CUDA


def test_migrated_profiling_runs_without_a_warning_on_the_cpu():
    module = load(
        """
        import torch
        from torch.profiler import ProfilerActivity, profile


        def trace(model, x):
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                with torch.cuda.nvtx.range("forward"):
                    model(x)
            with torch.autograd.profiler.profile(use_cuda=True) as legacy:
                model(x)
            return prof, legacy
        """
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        prof, legacy = module.trace(torch.nn.Linear(2, 2), torch.ones(1, 2))
    names = {event.name for event in legacy.function_events}
    assert "aten::linear" in names
    assert any(event.name == "forward" for event in prof.events())
