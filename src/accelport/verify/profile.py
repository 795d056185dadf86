"""Where did the time go: per-op breakdown of a profiler trace, and the diff of two traces.

The end-to-end time of the profiled steps is split among the operators the
program called, so that the rows always add up to the total:

* each instant when device work runs belongs to the kernels running then
  (shared equally between concurrent ones), and through their correlation id
  (or flow events, for torch_npu) to the top-level op that launched them;
* each instant when no device work runs but a host op does belongs to that op
  (the device is waiting for the host: launch gaps, host-bound code, fallbacks);
* the remaining instants are idle.

A row is one top-level ATen op (the op the Python code called: `aten::linear`,
not the `aten::addmm` inside it; a backward node for the backward pass) in one
module scope. Both sides of a diff are matched by (module, op), never by
kernel name, since vendors name kernels differently.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from accelport.verify import trace as tr

log = logging.getLogger(__name__)

IDLE_OP = "(no op running)"
ORPHAN_OP = "(device work without a launching op)"
OTHER_OP = "(other rows)"
BACKWARD_PREFIX = "autograd::engine::evaluate_function: "
COPY_OPS = frozenset(
    {
        "aten::copy_",
        "aten::to",
        "aten::_to_copy",
        "aten::contiguous",
        "aten::clone",
        "aten::transpose",
        "aten::permute",
        "aten::t",
        "aten::_copy_from",
        "aten::_copy_from_and_resize",
    }
)
COMM_PREFIXES = ("c10d::", "nccl:", "hccl", "gloo:", "record_param_comms", "_c10d_functional::")
COMM_KERNEL_WORDS = ("nccl", "rccl", "hccl", "xccl", "mccl", "cncl", "allreduce", "allgather", "reducescatter")

# Why-tag thresholds: small changes are noise, not a reason.
RELATIVE_NOISE = 0.10
HOST_BOUND_SHARE = 0.5
NOISE_SHARE = 0.005  # a row that moved less than 0.5% of the step time gets no "slower" tag


@dataclass
class OpStats:
    """One side of a row; times in microseconds per profiled step."""

    calls: float = 0.0
    time: float = 0.0  # share of the end-to-end step time (rows add up to the total)
    host_time: float = 0.0  # part of `time` when the device was idle and this op ran on the host
    cpu_time: float = 0.0  # inclusive host duration
    self_time: float = 0.0  # host duration minus nested ops
    device_time: float = 0.0  # sum of its kernels' durations
    kernels: float = 0.0
    copies: float = 0.0  # nested copy/cast/transpose ops plus memcpy work
    transfers: float = 0.0  # memcpy/memset device work (part of `kernels`)
    comm: bool = False
    shapes: str = ""

    @property
    def kernels_per_call(self) -> float:
        return self.kernels / self.calls if self.calls else 0.0

    @property
    def compute_kernels_per_call(self) -> float:
        return (self.kernels - self.transfers) / self.calls if self.calls else 0.0

    @property
    def time_per_call(self) -> float:
        return self.time / self.calls if self.calls else 0.0

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["kernels_per_call"] = self.kernels_per_call
        return data


@dataclass
class TraceProfile:
    """One trace reduced to rows keyed by (module, op)."""

    path: str
    device: str
    has_device: bool
    steps: int
    step_source: str  # "ProfilerStep" or "whole trace"
    total: float  # end-to-end microseconds per step
    events: int
    rows: dict[tuple[str, str], OpStats] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "device": self.device,
            "has_device": self.has_device,
            "steps": self.steps,
            "step_source": self.step_source,
            "total_us_per_step": self.total,
            "events": self.events,
        }


@dataclass(frozen=True)
class DiffRow:
    module: str
    op: str
    base: OpStats | None
    test: OpStats | None
    delta: float  # microseconds per step, test - base
    share: float  # fraction of the end-to-end delta
    why: tuple[str, ...]

    @property
    def ratio(self) -> float | None:
        if self.base is None or self.test is None or self.base.time <= 0:
            return None
        return self.test.time / self.base.time

    def to_dict(self) -> dict[str, Any]:
        return {
            "module": self.module,
            "op": self.op,
            "delta_us": self.delta,
            "ratio": self.ratio,
            "share": self.share,
            "why": list(self.why),
            "base": self.base.to_dict() if self.base else None,
            "test": self.test.to_dict() if self.test else None,
        }


@dataclass
class ProfileDiff:
    base: TraceProfile
    test: TraceProfile
    rows: list[DiffRow]

    @property
    def total_delta(self) -> float:
        return self.test.total - self.base.total

    @property
    def ratio(self) -> float | None:
        return self.test.total / self.base.total if self.base.total > 0 else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "accelport.profile-diff",
            "version": 1,
            "units": "microseconds per profiled step",
            "base": self.base.to_dict(),
            "test": self.test.to_dict(),
            "total_delta_us": self.total_delta,
            "ratio": self.ratio,
            "rows_delta_sum_us": sum(r.delta for r in self.rows),
            "rows": [r.to_dict() for r in self.rows],
        }


# --------------------------------------------------------------------------- one trace


def _is_comm(name: str) -> bool:
    lowered = name.lower()
    return name.startswith(COMM_PREFIXES) or any(word in lowered for word in COMM_KERNEL_WORDS)


def summarize(trace: tr.Trace) -> TraceProfile:
    """Split the profiled steps' time among top-level ops (see the module docstring)."""
    import numpy as np

    kind, names, strings = trace.kind, trace.name, trace.strings
    n = len(trace)
    start = trace.ts
    end = trace.ts + np.maximum(trace.dur, 0.0)

    # --- nesting on each host thread: top-level op and scope of every host event
    host = np.nonzero(np.isin(kind, tr.HOST_KINDS))[0]
    device = np.nonzero(np.isin(kind, tr.DEVICE_KINDS))[0]
    flows = trace.flows
    corr_linked = np.zeros(n, dtype=bool)
    if len(device):
        launch_corr = trace.corr[kind == tr.LAUNCH]
        corr_linked[device] = np.isin(trace.corr[device], launch_corr[launch_corr >= 0])
    use_flows = len(flows["id"]) > 0 and bool(np.any(~corr_linked[device])) if len(device) else False
    flow_starts = np.nonzero(flows["start"] == 1)[0] if use_flows else np.zeros(0, dtype=np.int64)

    seq_track = np.concatenate([trace.track[host], flows["track"][flow_starts]])
    seq_ts = np.concatenate([start[host], flows["ts"][flow_starts]])
    seq_dur = np.concatenate([trace.dur[host], np.zeros(len(flow_starts))])
    seq_id = np.concatenate([host, n + np.arange(len(flow_starts))])
    order = np.lexsort((-seq_dur, seq_ts, seq_track))

    top_of = np.full(n, -1, dtype=np.int64)
    scope_of = np.full(n, -1, dtype=np.int64)  # interned scope string
    child_sum = np.zeros(n)
    copies = np.zeros(n)
    flow_owner = np.full(len(flow_starts), -1, dtype=np.int64)
    scope_strings: list[str] = [""]
    scope_ids: dict[str, int] = {"": 0}
    copy_ids = {i for i, s in enumerate(strings) if s in COPY_OPS}
    kinds_l = kind.tolist()
    names_l = names.tolist()
    ends_l = end.tolist()
    ids = seq_id[order].tolist()
    tracks = seq_track[order].tolist()
    starts = seq_ts[order].tolist()

    def scope_code(text: str) -> int:
        code = scope_ids.get(text)
        if code is None:
            code = scope_ids[text] = len(scope_strings)
            scope_strings.append(text)
        return code

    stack: list[tuple[float, int, int, int]] = []  # (end, top op, scope, event)
    current = -1
    for i, t, s in zip(ids, tracks, starts, strict=True):
        if t != current:
            stack.clear()
            current = t
        while stack and stack[-1][0] <= s:
            stack.pop()
        if stack:
            _, parent_top, parent_scope, parent = stack[-1]
        else:
            parent_top, parent_scope, parent = -1, 0, -1
        if i >= n:
            flow_owner[i - n] = parent_top
            continue
        k = kinds_l[i]
        e = ends_l[i]
        if parent >= 0:
            child_sum[parent] += e - s
        if k == tr.CPU_OP:
            top = parent_top if parent_top >= 0 else i
            top_of[i] = top
            scope_of[i] = parent_scope
            if parent_top >= 0 and names_l[i] in copy_ids:
                copies[top] += 1
            stack.append((e, top, parent_scope, i))
        elif k == tr.LAUNCH:
            top_of[i] = parent_top
            stack.append((e, parent_top, parent_scope, i))
        elif k == tr.MODULE:
            label = strings[names_l[i]]
            if label.startswith(tr.TORCH_MODULE_PREFIX):
                label = label[len(tr.TORCH_MODULE_PREFIX) :]
                label = f"{scope_strings[parent_scope]}/{label}" if parent_scope else label
            stack.append((e, parent_top, scope_code(label), i))
        elif k == tr.ANNOTATION:
            label = strings[names_l[i]]
            label = f"{scope_strings[parent_scope]} / {label}" if parent_scope else label
            stack.append((e, parent_top, scope_code(label), i))
        else:  # STEP and anything else that only nests
            stack.append((e, parent_top, parent_scope, i))

    # --- the window: profiled steps, or the whole trace
    steps = np.nonzero(kind == tr.STEP)[0]
    if len(steps):
        step_names = {strings[j] for j in names[steps].tolist()}
        n_steps = len(step_names)
        w0 = float(start[steps].min())
        w1 = float(end[steps].max())
        step_source = "ProfilerStep"
    else:
        busy = np.concatenate([np.nonzero(kind == tr.CPU_OP)[0], device])
        if not len(busy):
            busy = np.arange(n)
        n_steps = 1
        w0 = float(start[busy].min())
        w1 = float(end[busy].max())
        step_source = "whole trace"

    # --- device work -> launching top-level op
    owner = np.full(len(device), -1, dtype=np.int64)
    if len(device):
        launches = np.nonzero((kind == tr.LAUNCH) & (trace.corr >= 0))[0]
        if len(launches):
            by_corr = launches[np.argsort(trace.corr[launches], kind="stable")]
            keys = trace.corr[by_corr]
            pos = np.clip(np.searchsorted(keys, trace.corr[device]), 0, len(keys) - 1)
            hit = (keys[pos] == trace.corr[device]) & (trace.corr[device] >= 0)
            owner[hit] = top_of[by_corr[pos[hit]]]
        missing = owner < 0
        if missing.any():
            ops = np.nonzero((kind == tr.CPU_OP) & (trace.ext >= 0))[0]
            if len(ops):
                by_ext = ops[np.argsort(trace.ext[ops], kind="stable")]
                keys = trace.ext[by_ext]
                want = trace.ext[device]
                pos = np.clip(np.searchsorted(keys, want), 0, len(keys) - 1)
                hit = missing & (keys[pos] == want) & (want >= 0)
                owner[hit] = top_of[by_ext[pos[hit]]]
        if use_flows and (owner < 0).any():
            _link_by_flows(trace, device, owner, flow_starts, flow_owner)
        # Device work that belongs to the window: it starts inside it or was launched inside it.
        w1 = max(w1, float(end[device[(start[device] < w1) & (start[device] >= w0)]].max(initial=w1)))

    # --- attribute every instant of the window
    tops = np.nonzero((kind == tr.CPU_OP) & (top_of == np.arange(n)))[0]
    d_s = np.clip(start[device], w0, w1)
    d_e = np.clip(end[device], w0, w1)
    t_s = np.clip(start[tops], w0, w1)
    t_e = np.clip(end[tops], w0, w1)
    bounds = np.unique(np.concatenate([d_s, d_e, t_s, t_e, [w0, w1]]))
    seg = np.diff(bounds)

    def active(s, e):
        count = np.zeros(len(bounds) + 1)
        np.add.at(count, np.searchsorted(bounds, s), 1)
        np.add.at(count, np.searchsorted(bounds, e), -1)
        return np.cumsum(count)[:-2], np.searchsorted(bounds, s), np.searchsorted(bounds, e)

    d_count, d_si, d_ei = active(d_s, d_e)
    t_count, t_si, t_ei = active(t_s, t_e)
    d_weight = np.where(d_count > 0, seg / np.maximum(d_count, 1), 0.0)
    t_weight = np.where((d_count <= 0) & (t_count > 0), seg / np.maximum(t_count, 1), 0.0)
    d_cum = np.concatenate([[0.0], np.cumsum(d_weight)])
    t_cum = np.concatenate([[0.0], np.cumsum(t_weight)])
    device_share = d_cum[d_ei] - d_cum[d_si]
    host_share = t_cum[t_ei] - t_cum[t_si]
    idle = float(seg[(d_count <= 0) & (t_count <= 0)].sum())

    # --- rows
    backward_seq_scope = _forward_scopes(trace, top_of, scope_of)
    in_window = (start[tops] >= w0) & (start[tops] < w1)
    row_of_top = np.full(len(tops), -1, dtype=np.int64)
    keys: list[tuple[str, str]] = []
    key_ids: dict[tuple[str, str], int] = {}
    top_names = names[tops].tolist()
    top_scopes = scope_of[tops].tolist()
    top_seq = trace.seq[tops].tolist()
    for j, (name_id, scope, sq) in enumerate(zip(top_names, top_scopes, top_seq, strict=True)):
        label = strings[name_id]
        module = scope_strings[scope] if scope >= 0 else ""
        if label.startswith(BACKWARD_PREFIX):
            label = label[len(BACKWARD_PREFIX) :]
            module = backward_seq_scope.get(sq, module) if sq >= 0 else module
            if isinstance(module, int):
                module = scope_strings[module]
        key = (module, label)
        code = key_ids.get(key)
        if code is None:
            code = key_ids[key] = len(keys)
            keys.append(key)
        row_of_top[j] = code
    orphan_row = len(keys)
    idle_row = orphan_row + 1
    n_rows = idle_row + 1

    index_of_top = np.full(n, -1, dtype=np.int64)
    index_of_top[tops] = np.arange(len(tops))
    dev_row = np.full(len(device), orphan_row, dtype=np.int64)
    owned = owner >= 0
    dev_row[owned] = row_of_top[index_of_top[owner[owned]]]
    dev_in_window = (start[device] >= w0) & (start[device] < w1)

    def per_row(rows, weights, length=n_rows):
        return np.bincount(rows, weights=weights, minlength=length)

    time = per_row(row_of_top, host_share) + per_row(dev_row, device_share)
    time[idle_row] += idle
    host_time = per_row(row_of_top, host_share)
    calls = per_row(row_of_top, in_window.astype(float))
    cpu_time = per_row(row_of_top, np.where(in_window, trace.dur[tops], 0.0))
    self_time = per_row(row_of_top, np.where(in_window, trace.dur[tops] - child_sum[tops], 0.0))
    device_time = per_row(dev_row, np.where(dev_in_window, trace.dur[device], 0.0))
    kernels = per_row(dev_row, dev_in_window.astype(float))
    memcpy = per_row(dev_row, (dev_in_window & (kind[device] == tr.MEMCPY)).astype(float))
    transfers = per_row(dev_row, (dev_in_window & np.isin(kind[device], (tr.MEMCPY, tr.MEMSET))).astype(float))
    copy_count = per_row(row_of_top, np.where(in_window, copies[tops], 0.0)) + memcpy
    comm_kernel = np.zeros(n_rows, dtype=bool)
    if len(device):
        comm_names = np.array([_is_comm(s) for s in strings], dtype=bool)
        comm_kernel = per_row(dev_row, comm_names[names[device]].astype(float)) > 0
    first_dims: dict[int, str] = {}
    for j in np.nonzero(trace.dims[tops] >= 0)[0].tolist():
        first_dims.setdefault(int(row_of_top[j]), strings[int(trace.dims[tops[j]])])

    rows: dict[tuple[str, str], OpStats] = {}
    labels = [*keys, ("", ORPHAN_OP), ("", IDLE_OP)]
    for r, key in enumerate(labels):
        if time[r] == 0 and calls[r] == 0 and kernels[r] == 0:
            continue
        rows[key] = OpStats(
            calls=calls[r] / n_steps,
            time=time[r] / n_steps,
            host_time=host_time[r] / n_steps,
            cpu_time=cpu_time[r] / n_steps,
            self_time=self_time[r] / n_steps,
            device_time=device_time[r] / n_steps,
            kernels=kernels[r] / n_steps,
            copies=copy_count[r] / n_steps,
            transfers=transfers[r] / n_steps,
            comm=bool(comm_kernel[r] or _is_comm(key[1])),
            shapes=first_dims.get(r, ""),
        )
    return TraceProfile(
        path=str(trace.path),
        device=trace.device_name(),
        has_device=bool(len(device)),
        steps=n_steps,
        step_source=step_source,
        total=(w1 - w0) / n_steps,
        events=trace.event_count,
        rows=rows,
    )


def _forward_scopes(trace: tr.Trace, top_of, scope_of) -> dict[int, int]:
    """Autograd sequence number -> scope of the forward op that recorded it (first occurrence)."""
    import numpy as np

    candidates = np.nonzero((trace.kind == tr.CPU_OP) & (trace.seq >= 0))[0]
    if not len(candidates):
        return {}
    backward_name = np.array(
        [s.startswith("autograd::") or "Backward" in s for s in trace.strings], dtype=bool
    )
    candidates = candidates[~backward_name[trace.name[candidates]]]
    candidates = candidates[np.argsort(trace.ts[candidates], kind="stable")]
    seqs, first = np.unique(trace.seq[candidates], return_index=True)
    return dict(zip(seqs.tolist(), scope_of[candidates[first]].tolist(), strict=True))


def _link_by_flows(trace: tr.Trace, device, owner, flow_starts, flow_owner) -> None:
    """torch_npu and other traces without correlation ids: follow s -> f flow pairs."""
    import numpy as np

    flows = trace.flows
    start_owner = dict(zip(flows["id"][flow_starts].tolist(), flow_owner.tolist(), strict=True))
    ends = np.nonzero(flows["start"] == 0)[0]
    position: dict[tuple[int, float], int] = {}
    for j, (t, s) in enumerate(zip(trace.track[device].tolist(), trace.ts[device].tolist(), strict=True)):
        position.setdefault((t, round(s, 3)), j)
    for f in ends.tolist():
        j = position.get((int(flows["track"][f]), round(float(flows["ts"][f]), 3)))
        if j is not None and owner[j] < 0:
            owner[j] = start_owner.get(int(flows["id"][f]), -1)


def profile_trace(path: str | Path) -> TraceProfile:
    return summarize(tr.load_trace(path))


# --------------------------------------------------------------------------- diff


def _why(base: OpStats | None, test: OpStats | None, test_has_device: bool, key: tuple[str, str],
         noise_floor: float) -> tuple[str, ...]:
    if key[1] == IDLE_OP:
        return ("idle",)
    if base is None:
        return ("new-op",)
    if test is None:
        return ("missing-op",)
    tags = []
    if base.compute_kernels_per_call > 0 and test.compute_kernels_per_call == 0 and test.calls > 0:
        tags.append("fallback-cpu")  # no device compute left: the op ran on the host (copies aside)
    elif test.kernels_per_call > base.kernels_per_call * (1 + RELATIVE_NOISE) and base.kernels_per_call > 0:
        tags.append("more-kernels")
    per_call_base = base.copies / base.calls if base.calls else 0.0
    per_call_test = test.copies / test.calls if test.calls else 0.0
    if per_call_test > per_call_base + 0.5:
        tags.append("extra-copies")
    if not math.isclose(base.calls, test.calls, rel_tol=0.01):
        tags.append("more-calls" if test.calls > base.calls else "fewer-calls")
    host_bound = test_has_device and test.time > 0 and test.host_time / test.time >= HOST_BOUND_SHARE
    if host_bound and test.host_time > base.host_time * (1 + RELATIVE_NOISE):
        tags.append("host-bound")
    if test.comm and test.time > base.time * (1 + RELATIVE_NOISE):
        tags.append("exposed-comm")
    if abs(test.time - base.time) < noise_floor:
        return tuple(tags)
    if (
        not tags
        and base.device_time > 0
        and test.device_time > base.device_time * (1 + RELATIVE_NOISE)
    ):
        tags.append("slower-kernels")
    if not tags and base.time_per_call > 0 and test.time_per_call > base.time_per_call * (1 + RELATIVE_NOISE):
        tags.append("slower")
    return tuple(tags)


def diff(base: TraceProfile, test: TraceProfile) -> ProfileDiff:
    total = test.total - base.total
    keys = list(base.rows)
    keys += [k for k in test.rows if k not in base.rows]
    rows = []
    for key in keys:
        b, t = base.rows.get(key), test.rows.get(key)
        delta = (t.time if t else 0.0) - (b.time if b else 0.0)
        rows.append(
            DiffRow(
                module=key[0],
                op=key[1],
                base=b,
                test=t,
                delta=delta,
                share=delta / total if total else 0.0,
                why=_why(b, t, test.has_device, key, NOISE_SHARE * base.total),
            )
        )
    direction = 1.0 if total >= 0 else -1.0
    rows.sort(key=lambda r: (-direction * r.delta, r.module, r.op))
    return ProfileDiff(base=base, test=test, rows=rows)


def diff_traces(base: str | Path, test: str | Path) -> ProfileDiff:
    """Load two traces and diff them (the library call behind `accelport profile-diff`)."""
    return diff(profile_trace(base), profile_trace(test))


def top_rows(result: ProfileDiff, limit: int | None) -> list[DiffRow]:
    """The first `limit` rows plus one row holding the rest, so the shown rows still add up."""
    if limit is None or len(result.rows) <= limit:
        return list(result.rows)
    shown = result.rows[:limit]
    rest = result.rows[limit:]
    delta = sum(r.delta for r in rest)
    total = result.total_delta
    other = DiffRow(
        module="",
        op=f"{OTHER_OP}: {len(rest)}",
        base=None,
        test=None,
        delta=delta,
        share=delta / total if total else 0.0,
        why=(),
    )
    return [*shown, other]


# --------------------------------------------------------------------------- capture


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
        # torch writes the file by name: write beside the target, then rename (never half a trace).
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        try:
            prof.export_chrome_trace(str(tmp))
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
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


def format_ms(us: float | None) -> str:
    return "-" if us is None else f"{us / 1000.0:.3f}"


def describe_sides(result: ProfileDiff) -> list[tuple[str, str]]:
    def side(p: TraceProfile) -> str:
        where = p.device or ("host only" if not p.has_device else "device")
        return f"{p.path} ({where}; {p.steps} step(s) from {p.step_source}; {p.events} events)"

    return [("base", side(result.base)), ("test", side(result.test))]


def row_cells(row: DiffRow) -> list[object]:
    def get(stats: OpStats | None, attr: str) -> float | None:
        return getattr(stats, attr) if stats is not None else None

    ratio = row.ratio
    return [
        row.module or "-",
        row.op,
        _pair(get(row.base, "calls"), get(row.test, "calls"), "{:.3g}"),
        format_ms(get(row.base, "time")),
        format_ms(get(row.test, "time")),
        f"{row.delta / 1000.0:+.3f}",
        "-" if ratio is None else f"{ratio:.2f}x",
        f"{row.share * 100:.1f}%",
        _pair(row.base.kernels_per_call if row.base else None, row.test.kernels_per_call if row.test else None, "{:.3g}"),
        _pair(get(row.base, "self_time"), get(row.test, "self_time"), "{:.3f}", scale=1000.0),
        ((row.test or row.base).shapes if (row.test or row.base) else "")[:48],
        ",".join(row.why),
    ]


ROW_HEADERS = (
    "module",
    "op",
    "calls b/t",
    "base ms",
    "test ms",
    "delta ms",
    "ratio",
    "share",
    "kernels/call b/t",
    "self ms b/t",
    "input shapes",
    "why",
)


def _pair(base: float | None, test: float | None, fmt: str, scale: float = 1.0) -> str:
    def one(value: float | None) -> str:
        return "-" if value is None else fmt.format(value / scale)

    return f"{one(base)}/{one(test)}"


def as_rows(rows: Sequence[DiffRow]) -> list[list[object]]:
    return [row_cells(r) for r in rows]


def add_diff_to_page(page: Any, result: ProfileDiff, limit: int = 25) -> None:
    """Cards, the waterfall of the delta and the row table, appended to an `HtmlPage`."""
    from accelport.report.waterfall import waterfall_chart

    ratio = result.ratio
    page.cards(
        [
            ("base ms/step", f"{result.base.total / 1000:.3f}"),
            ("test ms/step", f"{result.test.total / 1000:.3f}"),
            ("delta ms/step", f"{result.total_delta / 1000:+.3f}"),
            ("test/base", "-" if ratio is None else f"{ratio:.2f}x"),
        ]
    )
    page.table(["side", "trace"], describe_sides(result), code_columns=(1,))
    shown = top_rows(result, min(limit, 15))
    page.svg(
        waterfall_chart(
            ("base step", result.base.total / 1000),
            [(f"{r.module} {r.op}".strip(), r.delta / 1000) for r in shown],
            "test step",
            title="Where the step-time delta comes from",
            unit="ms",
        ),
        caption="Each bar is one op in one module; red adds time, green saves it. Bars add up to the test step time.",
    )
    page.table(list(ROW_HEADERS), as_rows(top_rows(result, limit)), code_columns=(0, 1, 10))


def render_html(result: ProfileDiff, limit: int = 25) -> str:
    from accelport.report.html import HtmlPage

    page = HtmlPage("accelport profile-diff", "per-op time per profiled step; rows add up to the end-to-end delta")
    add_diff_to_page(page, result, limit)
    return page.render()


def render_text(result: ProfileDiff, limit: int = 25) -> str:
    from accelport.report.table import text_table

    lines = [f"{name}: {text}" for name, text in describe_sides(result)]
    ratio = result.ratio
    lines.append(
        f"step time: base {format_ms(result.base.total)} ms, test {format_ms(result.test.total)} ms, "
        f"delta {result.total_delta / 1000:+.3f} ms ({'-' if ratio is None else f'{ratio:.2f}x'}); "
        f"rows add up to {sum(r.delta for r in result.rows) / 1000:+.3f} ms"
    )
    return "\n".join(lines) + "\n\n" + text_table(ROW_HEADERS, as_rows(top_rows(result, limit)))


def render_single(profile: TraceProfile, limit: int = 15) -> str:
    """The breakdown of one trace: its largest rows."""
    from accelport.report.table import text_table

    rows = sorted(profile.rows.items(), key=lambda item: -item[1].time)
    shown = [
        [key[0] or "-", key[1], f"{s.calls:.3g}", format_ms(s.time), f"{s.time / profile.total * 100:.1f}%" if profile.total else "-",
         f"{s.kernels_per_call:.3g}", s.shapes[:48]]
        for key, s in rows[:limit]
    ]
    head = f"{profile.path}: {format_ms(profile.total)} ms per step over {profile.steps} step(s) ({profile.step_source})\n\n"
    return head + text_table(["module", "op", "calls", "ms/step", "share", "kernels/call", "input shapes"], shown)


# --------------------------------------------------------------------------- `accelport profile -- python script.py`


def _child(argv: Sequence[str]) -> int:
    """Run a script under the profiler (started by `accelport profile` as `python -m accelport.verify.profile`)."""
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
    sys.argv = [args.script, *args.args]
    sys.path.insert(0, str(Path(args.script).resolve().parent))
    if args.steps:
        from accelport.verify import bench

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
    target = Path(args.trace)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        prof.export_chrome_trace(str(tmp))
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(_child(sys.argv[1:]))
