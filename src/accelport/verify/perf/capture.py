"""Capturing a trace: torch.profiler with the device's activities, module scopes, and the child behind `accelport profile`."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from accelport.verify.perf import trace as tr


def choose_activities(device_type: str | None = None) -> list:
    """torch.profiler activities for the current device: CPU plus the vendor's device activity."""
    import torch
    from torch.profiler import ProfilerActivity

    from accelport import knowledge

    if device_type is None:
        current = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
        device_type = current.type if current is not None else "cpu"
    activities = [ProfilerActivity.CPU]
    profile = knowledge.vendor_for_device(device_type)
    name = profile.profiler_activity if profile else "PrivateUse1"
    activity = getattr(ProfilerActivity, name, None)
    if device_type != "cpu" and activity is not None and activity not in activities:
        activities.append(activity)
    return activities


class ModuleScopes:
    """Forward hooks that wrap every module call in a record_function named by its path.

    The path comes from the root module's named_modules(), found the first time a
    module runs with no other module around it, so scripts need no changes.
    """

    def __init__(self, model: Any = None) -> None:
        self.paths: dict[int, str] = {}
        self.stack: list[tuple[int, Any]] = []
        self.handles: list[Any] = []
        if model is not None:
            self._learn(model)

    def _learn(self, root: Any) -> None:
        for path, module in root.named_modules():
            self.paths.setdefault(id(module), path or type(root).__name__)

    def _pre(self, module: Any, _inputs: Any) -> None:
        from torch.autograd.profiler import record_function

        key = id(module)
        if key not in self.paths:
            if self.stack:
                parent = self.paths.get(self.stack[-1][0], "")
                self.paths[key] = f"{parent}.{type(module).__name__}"
            else:
                self._learn(module)
        scope = record_function(tr.MODULE_PREFIX + self.paths[key])
        scope.__enter__()
        self.stack.append((key, scope))

    def _post(self, module: Any, _inputs: Any, _output: Any) -> None:
        key = id(module)
        # A forward that raised leaves its scope behind; close up to this module.
        while self.stack:
            owner, scope = self.stack.pop()
            scope.__exit__(None, None, None)
            if owner == key:
                break

    def __enter__(self) -> ModuleScopes:
        from torch.nn.modules import module as nn_module

        self.handles = [
            nn_module.register_module_forward_pre_hook(self._pre),
            nn_module.register_module_forward_hook(self._post),
        ]
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self.handles:
            handle.remove()
        while self.stack:
            self.stack.pop()[1].__exit__(None, None, None)


def _export_trace(prof: Any, target: Path) -> None:
    """torch writes the trace by file name: write it beside the target, then rename (never half a trace)."""
    from accelport.fileio import atomic_path

    with atomic_path(target) as tmp:
        prof.export_chrome_trace(str(tmp))


@contextlib.contextmanager
def profiling(trace_path: str | Path, *, steps: int, warmup: int = 1, model: Any = None,
              device_type: str | None = None) -> Iterator[Callable[[], bool]]:
    """Profile `warmup` + `steps` steps; yields `step()` to call after each step (False when done).

    The trace (Chrome/Kineto JSON) is written to `trace_path` atomically once the
    profiled steps are over, or when the block ends.
    """
    import torch

    target = Path(trace_path)
    target.parent.mkdir(parents=True, exist_ok=True)
    written: list[bool] = []

    def export(prof: Any) -> None:
        _export_trace(prof, target)
        written.append(True)

    schedule = torch.profiler.schedule(wait=0, warmup=warmup, active=steps, repeat=1)
    done = [0]
    with ModuleScopes(model), torch.profiler.profile(
        activities=choose_activities(device_type),
        schedule=schedule,
        on_trace_ready=export,
        record_shapes=True,
    ) as prof:

        def step() -> bool:
            prof.step()
            done[0] += 1
            return done[0] < warmup + steps

        yield step
    if not written:
        raise RuntimeError(f"{target}: the profiler wrote no trace; run at least {warmup + steps} steps")


def capture(step_fn: Callable[[], Any], trace_path: str | Path, *, steps: int = 3, warmup: int = 1,
            model: Any = None) -> Path:
    """Run `step_fn` warmup+steps times under torch.profiler; returns the trace path."""
    with profiling(trace_path, steps=steps, warmup=warmup, model=model) as step:
        for _ in range(warmup + steps):
            step_fn()
            step()
    return Path(trace_path)



def _child(argv: Sequence[str]) -> int:
    """Run a script under the profiler (started by `accelport profile` as `python -m accelport.verify.perf.profile`)."""
    import argparse
    import runpy
    import sys

    parser = argparse.ArgumentParser(prog="accelport-profile-child")
    parser.add_argument("--trace", required=True)
    parser.add_argument("--steps", type=int)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("script")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    try:
        import torch
    except ImportError:
        print(f"accelport profile: {sys.executable} has no torch; run the script with a Python that has it, "
              "e.g. `accelport profile -- /path/to/venv/bin/python train.py`", file=sys.stderr)
        return 2
    sys.argv = [args.script, *args.args]
    sys.path.insert(0, str(Path(args.script).resolve().parent))
    if args.steps:
        from accelport.verify.perf import bench

        session = profiling(args.trace, steps=args.steps, warmup=args.warmup)
        step = session.__enter__()

        def hook() -> bool:
            if step():
                return True
            session.__exit__(None, None, None)
            raise SystemExit(0)  # the profiled steps are done (documented: the run stops here)

        bench.add_step_hook(hook)
        try:
            runpy.run_path(args.script, run_name="__main__")
        except SystemExit as exc:
            if exc.code not in (0, None):
                raise
        else:
            session.__exit__(None, None, None)
        return 0
    import torch

    with ModuleScopes(), torch.profiler.profile(activities=choose_activities(), record_shapes=True) as prof:
        try:
            runpy.run_path(args.script, run_name="__main__")
        except SystemExit as exc:
            if exc.code not in (0, None):
                raise
    _export_trace(prof, Path(args.trace))
    return 0

