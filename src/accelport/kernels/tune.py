"""The autotuner: time the configuration generator's candidates on a device and keep the fastest per shape bucket.

Candidates are the survivors of `configs.generate` for the device's hardware
profile (so nothing that cannot fit on chip is ever timed), best-first, capped
at `max_configs`. Each is timed on the operator's Triton implementation with the
config pinned; a candidate that fails to compile or run is reported and skipped.
The winners become a tuned table (`configs.table_json`), keyed by device and
shape bucket, which `configs.choose` reads when ACCELPORT_KERNEL_TUNED names it
(or when it is committed to knowledge/kernels/tuned/).

On CPU the Triton implementation runs under the interpreter: the mechanism is
the same, but the timings say nothing about a GPU, and the table says so.
"""

from __future__ import annotations

import datetime
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accelport import __version__
from accelport.errors import ParameterHint, UserError
from accelport.fileio import atomic_write_text
from accelport.kernels import bench, configs, hardware, tl_compat
from accelport.kernels.registry import Case, Operator


@dataclass(frozen=True)
class Trial:
    op: str
    case: str
    dtype: str
    bucket: str
    config: str
    ms: float | None
    error: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"op": self.op, "case": self.case, "dtype": self.dtype, "bucket": self.bucket, "config": self.config, "ms": self.ms, "error": self.error}


def tune_case(op: Operator, case: Case, dtype: str, device: Any, max_configs: int) -> tuple[list[Trial], configs.TunedEntry | None]:
    import torch

    device = torch.device(device)
    problem = op.problem(case, dtype)
    hw = configs.profile_for(device)
    bucket = op.config_space.bucket(problem)
    candidates = configs.generate(op.config_space, problem, hw).configs[:max_configs]
    inputs = op.make_inputs(case, getattr(torch, dtype), device, torch.Generator().manual_seed(0))
    trials: list[Trial] = []
    best: tuple[float, configs.Config] | None = None
    for config in candidates:
        try:
            with configs.pinned({op.name: config}), torch.no_grad():
                ms = bench.time_ms(lambda: op.triton(*inputs.args, **inputs.kwargs), device, min_reps=3, budget_s=0.2)
        except Exception as exc:  # out of resources, a compile error: this candidate is out
            trials.append(Trial(op.name, case.label, dtype, bucket, config.label, None, f"{type(exc).__name__}: {str(exc)[:200]}"))
            continue
        trials.append(Trial(op.name, case.label, dtype, bucket, config.label, ms))
        if best is None or ms < best[0]:
            best = (ms, config)
    if best is None:
        return trials, None
    return trials, configs.TunedEntry(configs.device_key(device), op.name, dtype, bucket, best[1], round(best[0], 5), "tune")


def tune(
    ops: Sequence[Operator],
    device: Any,
    dtypes: Sequence[str] | None = None,
    which: str | None = None,
    max_configs: int = 8,
    table: Path | None = None,
) -> tuple[list[Trial], list[configs.TunedEntry]]:
    """Tune `ops` on `device` over a case matrix (CPU: the small one, else the bench one).

    With `table`, the winners are merged into it after each operator, so a run
    stopped part-way (a timeout, Ctrl-C) keeps every operator it finished.
    """
    import torch

    configs.check_tuned_tables()  # a bad table must not pass for a candidate that failed to run
    device = torch.device(device)
    if table is not None:
        check_table(table, device)
    which = which or ("small" if device.type == "cpu" else "bench")
    trials: list[Trial] = []
    entries: dict[tuple[str, str, str], configs.TunedEntry] = {}
    for op in ops:
        found: dict[tuple[str, str, str], configs.TunedEntry] = {}
        for case in bench.cases_for(op, which):
            for dtype in dtypes or op.dtypes:
                if dtype not in op.dtypes:
                    continue
                case_trials, entry = tune_case(op, case, dtype, device, max_configs)
                trials.extend(case_trials)
                if entry is not None:  # the first case of a shape bucket stands for the bucket
                    found.setdefault((entry.op, entry.dtype, entry.bucket), entry)
        entries.update(found)
        if table is not None and found:
            write_table(table, device, list(found.values()))
    return trials, list(entries.values())


def _existing(path: Path, key: str) -> list[configs.TunedEntry]:
    """The entries already in the table at `path` (none if it does not exist); a UserError if it is not ours to merge."""
    if path.is_dir():
        raise ParameterHint(f"{path}: is a folder; give the table a file name, e.g. {path / f'tuned-{key}.json'}", "table")
    if not path.exists():
        return []
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ParameterHint(f"{path}: cannot read the tuned table to merge into ({exc.strerror}); choose another table file", "table") from None
    existing = configs.read_table(text, str(path))
    holds = json.loads(text)["device_key"]  # read_table has checked it is there
    if holds != key:
        raise UserError(f"{path}: holds a table for {holds}, not {key}; write to another file")
    return existing


def check_table(path: Path, device: Any) -> None:
    """Before tuning: the table can be merged into and its folder exists (missing parent folders are created)."""
    import torch

    _existing(path, configs.device_key(torch.device(device)))
    parent = path.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise ParameterHint(f"{path}: {parent} is not a folder (a file is in the way); choose another table file", "table") from None
    except OSError as exc:
        raise ParameterHint(f"{path}: cannot create its folder {parent} ({exc.strerror}); choose another table file", "table") from None
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ParameterHint(f"{path}: folder {parent} is not writable; choose another table file", "table")


def write_table(path: Path, device: Any, entries: Sequence[configs.TunedEntry]) -> None:
    """Write (or merge into) the tuned table at `path`, atomically; entries for the same key are replaced.

    Missing parent folders are created.
    """
    import torch

    device = torch.device(device)
    key = configs.device_key(device)
    merged = {(e.op, e.dtype, e.bucket): e for e in _existing(path, key)}
    merged.update({(e.op, e.dtype, e.bucket): e for e in entries})
    timed = (
        "Triton interpreter on CPU: exercises tuning, says nothing about GPU speed"
        if device.type == "cpu"
        else "median of CUDA/HIP events after warm-up, L2 flushed between runs"
    )
    provenance = {
        "source": "accelport kernels tune",
        "accelport": __version__,
        "triton": tl_compat.TRITON_VERSION,
        "torch": torch.__version__,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "timed": timed,
    }
    text = configs.table_json(key, hardware.device_name(device), list(merged.values()), provenance)
    json.loads(text)  # never write what cannot be read back
    try:
        atomic_write_text(path, text)
    except OSError as exc:
        raise ParameterHint(f"{path}: cannot write the tuned table ({exc.strerror}); choose another table file", "table") from None
    configs.clear_tuned_cache()
