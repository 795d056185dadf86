"""Capturing a trace: torch.profiler with the device's activities, module scopes, and the child behind `accelport profile`."""

from __future__ import annotations

import contextlib
import re
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from accelport.errors import UserError
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


def capture_paths(folder: str | Path, captures: int) -> list[Path]:
    """Where `profiling(folder, captures=K)` writes its K traces: capture-1.json ... capture-K.json."""
    return [Path(folder) / f"capture-{n}.json" for n in range(1, captures + 1)]


def _natural_key(path: Path) -> list[Any]:
    """capture-2 before capture-10: runs of digits compare as numbers."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", path.name)]


def side_paths(path: str | Path) -> list[Path]:
    """The traces of one side of a diff: a trace file, or a folder of captures of the same program.

    A folder gives its direct children ending .json or .json.gz, in natural order. A path
    that does not exist is returned as it is, for the trace loader to report by name.
    """
    target = Path(path)
    if not target.is_dir():
        return [target]
    found = sorted((child for child in target.iterdir()
                    if child.is_file() and child.name.endswith((".json", ".json.gz"))), key=_natural_key)
    if not found:
        raise UserError(f"{target}: folder holds no trace (no file ending .json or .json.gz); put the traces of "
                        "several captures of one program there, or give a trace file")
    return found


@contextlib.contextmanager
def profiling(trace_path: str | Path, *, steps: int, warmup: int = 1, model: Any = None,
              device_type: str | None = None, captures: int = 1) -> Iterator[Callable[[], bool]]:
    """Profile `warmup` + `steps` steps; yields `step()` to call after each step (False when done).

    The trace (Chrome/Kineto JSON) is written to `trace_path` atomically once the
    profiled steps are over, or when the block ends.

    With `captures` > 1, `trace_path` is a folder (created if missing) and the cycle of
    `warmup` + `steps` steps runs `captures` times, each cycle's trace written to its own
    file (`capture_paths`); a cycle the block left unfinished is not written, and
    capture-N.json files beyond the last one, from an earlier run, are removed.
    """
    import torch

    if captures < 1:
        raise ValueError(f"captures {captures}: must be at least 1")
    several = captures > 1
    target = Path(trace_path)
    targets = capture_paths(target, captures) if several else [target]
    (target if several else target.parent).mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    stepping = [False]

    def export(prof: Any) -> None:
        if several and not stepping[0]:
            return  # the block ended inside a cycle: half a capture would skew the between-capture spread
        _export_trace(prof, targets[len(written)])
        written.append(targets[len(written)])

    cycle = warmup + steps
    schedule = torch.profiler.schedule(wait=0, warmup=warmup, active=steps, repeat=captures)
    done = [0]
    with ModuleScopes(model), torch.profiler.profile(
        activities=choose_activities(device_type),
        schedule=schedule,
        on_trace_ready=export,
        record_shapes=True,
    ) as prof:

        def step() -> bool:
            stepping[0] = True
            try:
                with warnings.catch_warnings():
                    # torch warns that each cycle starts afresh: for captures that is the point.
                    warnings.filterwarnings("ignore", message=".*Profiler clears events at the end of each cycle")
                    prof.step()
            finally:
                stepping[0] = False
            done[0] += 1
            return done[0] < captures * cycle

        yield step
    if not written:
        raise RuntimeError(f"{target}: the profiler wrote no trace; run at least {captures * cycle} steps")
    if len(written) < captures:
        raise RuntimeError(f"{target}: the profiler wrote {len(written)} of {captures} captures after {done[0]} "
                           f"steps; {captures} captures of {warmup} warmup + {steps} profiled steps need "
                           f"{captures * cycle} steps")
    if several:
        for stale in target.glob("capture-*.json"):
            number = stale.name[len("capture-"):-len(".json")]
            if number.isdigit() and int(number) > captures:
                stale.unlink()


def capture(step_fn: Callable[[], Any], trace_path: str | Path, *, steps: int = 3, warmup: int = 1,
            model: Any = None, captures: int = 1) -> Path:
    """Run `step_fn` (warmup+steps) x captures times under torch.profiler; returns the trace path.

    With `captures` > 1 the path is the folder holding capture-1.json ... capture-K.json.
    """
    with profiling(trace_path, steps=steps, warmup=warmup, model=model, captures=captures) as step:
        for _ in range(captures * (warmup + steps)):
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
    parser.add_argument("--captures", type=int, default=1)  # > 1: --trace is the folder of the captures
    parser.add_argument("script")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.captures > 1 and not args.steps:
        parser.error("several captures need --steps: each capture is a count of marked steps")
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

        session = profiling(args.trace, steps=args.steps, warmup=args.warmup, captures=args.captures)
        step = session.__enter__()

        closed = []

        def hook() -> bool:
            if step():
                return True
            closed.append(True)
            session.__exit__(None, None, None)
            raise SystemExit(0)  # the profiled steps are done (documented: the run stops here)

        bench.add_step_hook(hook)
        try:
            runpy.run_path(args.script, run_name="__main__")
        except SystemExit as exc:
            if exc.code not in (0, None):
                raise
        if not closed:  # the script ended before the profiled steps did
            try:
                session.__exit__(None, None, None)
            except RuntimeError as exc:
                print(f"accelport profile: {args.script}: {exc}", file=sys.stderr)
                return 2
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

