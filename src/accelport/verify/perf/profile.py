"""Where did the time go: per-op breakdown of a profiler trace, and the diff of two traces.

The end-to-end time of the profiled steps is split among the operators the
program called, so that the rows always add up to the total:

* each instant when device work runs belongs to the kernels running then
  (shared equally between concurrent ones), and through their correlation id
  (or flow events, for torch_npu) to the top-level op that launched them;
* each instant when no device work runs but a host op does belongs to that op
  (the device is waiting for the host: launch gaps, host-bound code, fallbacks);
* the remaining instants are idle.

The split is done step by step: each profiled step (its `ProfilerStep#N`
range, running on until the device work launched in it ends, never past the
start of the next step) is split on its own, so the rows add up to the
step's length; time between steps belongs to no step. The figures are then the mean over a set of steps chosen
by their lengths alone, the same set for every row, so the rows still add up
to the total exactly. By default that set is the faster half of the steps:
interference (another process taking the core, a page fault storm, the
garbage collector) only ever makes a step longer, so the slower steps are the
ones that carry it, and a single preempted op in one step can no longer move
its row by milliseconds. `steps_used="all"` averages every step; the length
of every step is kept in the profile, so a side whose steps are bimodal is
visible rather than hidden (see `TraceProfile.step_times`).

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
import statistics
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from accelport.verify.perf import trace as tr

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

# Traces larger than this in all are read in parallel processes (see profile_traces).
PARALLEL_BYTES = 32 << 20

# How sure a diff row is (see `_significance`): a structural change (an op appears, goes or
# changes its call count) is certain; a changed time is significant when it holds across the
# profiled steps, beyond what a row of an identical pair moves.
STRUCTURAL = "structural"
SIGNIFICANT = "significant"
NOISE = "noise"
UNKNOWN = "unknown"  # too few steps on a side to tell
FAMILY_ALPHA = 0.01  # chance that a pair of identical programs shows any significant row
MIN_STEPS = 4  # per side, for a per-step comparison
STRUCTURAL_TAGS = frozenset({"new-op", "missing-op", "more-calls", "fewer-calls"})

# Which profiled steps the figures are averaged over (see the module docstring).
FASTER_HALF = "faster-half"
ALL_STEPS = "all"
STEPS_USED = (FASTER_HALF, ALL_STEPS)


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
    per_step: list[float] = field(default_factory=list)  # this row's `time` in every profiled step, in order

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
    total: float  # end-to-end microseconds per step, over the kept steps
    events: int
    rows: dict[tuple[str, str], OpStats] = field(default_factory=dict)
    steps_used: str = ALL_STEPS  # which steps the figures average (STEPS_USED)
    kept_steps: int = 0
    step_times: list[float] = field(default_factory=list)  # length of every profiled step, in order

    @property
    def all_steps_total(self) -> float:
        """Mean length of every profiled step (equals `total` when every step is kept)."""
        return sum(self.step_times) / len(self.step_times) if self.step_times else self.total

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "device": self.device,
            "has_device": self.has_device,
            "steps": self.steps,
            "step_source": self.step_source,
            "steps_used": self.steps_used,
            "kept_steps": self.kept_steps,
            "total_us_per_step": self.total,
            "all_steps_us_per_step": self.all_steps_total,
            "step_times_us": self.step_times,
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
    significance: str = UNKNOWN  # STRUCTURAL, SIGNIFICANT, NOISE or UNKNOWN (see `_significance`)
    p_value: float | None = None  # of the per-step comparison (the larger of time and share)

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
            "significance": self.significance,
            "p_value": self.p_value,
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


def summarize(trace: tr.Trace, steps_used: str = FASTER_HALF) -> TraceProfile:
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

    top_of, scope_of, child_sum, copies, flow_owner, scope_strings = _nest(trace, start, end, host, flow_starts)
    del host

    # --- the steps: ProfilerStep ranges (by name: a step may have a range on several threads), or the whole trace
    steps = np.nonzero(kind == tr.STEP)[0]
    if len(steps):
        step_ids, step_of_range = np.unique(names[steps], return_inverse=True)
        step_start = np.full(len(step_ids), np.inf)
        step_end = np.full(len(step_ids), -np.inf)
        np.minimum.at(step_start, step_of_range, start[steps])
        np.maximum.at(step_end, step_of_range, end[steps])
        by_start = np.argsort(step_start, kind="stable")
        step_start, step_end = step_start[by_start], step_end[by_start]
        step_source = "ProfilerStep"
    else:
        busy = np.concatenate([np.nonzero(kind == tr.CPU_OP)[0], device])
        if not len(busy):
            busy = np.arange(n)
        step_start, step_end = start[busy].min(keepdims=True), end[busy].max(keepdims=True)
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
    edges = _step_edges(step_start, step_end, np.where(owner >= 0, start[np.maximum(owner, 0)], start[device]), end[device])
    n_steps = len(edges) // 2
    w0, w1 = float(edges[0]), float(edges[-1])

    # --- rows: one per (module, top-level op), then the orphan and idle rows
    tops = np.nonzero((kind == tr.CPU_OP) & (top_of == np.arange(n)))[0]
    row_of_top, keys = _row_keys(trace, tops, scope_of, scope_strings)
    orphan_row = len(keys)
    idle_row = orphan_row + 1
    n_rows = idle_row + 1
    index_of_top = np.full(n, -1, dtype=np.int32)
    index_of_top[tops] = np.arange(len(tops))
    dev_row = np.full(len(device), orphan_row, dtype=np.int64)
    owned = owner >= 0
    dev_row[owned] = row_of_top[index_of_top[owner[owned]]]

    # --- split the instants of the kept steps among the rows
    step_time = edges[1::2] - edges[0::2]
    kept = _kept_steps(step_time, steps_used)
    used = len(kept)
    time_by_step, host_by_step = _attribute(edges, start, end, tops, device, row_of_top, dev_row, idle_row, n_rows)
    time, host_time = time_by_step[:, kept].sum(axis=1), host_by_step[:, kept].sum(axis=1)

    # Counts and host/device durations: the events that start in a kept step.
    def kept_events(events):
        slot = np.searchsorted(edges, start[events], side="right") - 1  # 2k: in step k; odd: between steps
        inside = (start[events] >= w0) & (start[events] < w1) & (slot % 2 == 0)
        return inside & np.isin(slot // 2, kept)

    def per_row(rows, weights):
        return np.bincount(rows, weights=weights, minlength=n_rows)

    top_kept = kept_events(tops)
    dev_kept = kept_events(device)
    calls = per_row(row_of_top, top_kept.astype(float))
    cpu_time = per_row(row_of_top, np.where(top_kept, trace.dur[tops], 0.0))
    self_time = per_row(row_of_top, np.where(top_kept, trace.dur[tops] - child_sum[tops], 0.0))
    device_time = per_row(dev_row, np.where(dev_kept, trace.dur[device], 0.0))
    kernels = per_row(dev_row, dev_kept.astype(float))
    memcpy = per_row(dev_row, (dev_kept & (kind[device] == tr.MEMCPY)).astype(float))
    transfers = per_row(dev_row, (dev_kept & np.isin(kind[device], (tr.MEMCPY, tr.MEMSET))).astype(float))
    copy_count = per_row(row_of_top, np.where(top_kept, copies[tops], 0.0)) + memcpy
    comm_kernel = np.zeros(n_rows, dtype=bool)
    if len(device):
        comm_names = np.array([_is_comm(s) for s in strings], dtype=bool)
        comm_kernel = per_row(dev_row, comm_names[names[device]].astype(float)) > 0
    with_dims = np.nonzero(trace.dims[tops] >= 0)[0]
    shaped_rows, first = np.unique(row_of_top[with_dims], return_index=True)  # each row's first call with shapes
    first_dims = dict(zip(shaped_rows.tolist(), (strings[d] for d in trace.dims[tops[with_dims[first]]].tolist()), strict=True))

    rows: dict[tuple[str, str], OpStats] = {}
    labels = [*keys, ("", ORPHAN_OP), ("", IDLE_OP)]
    for r, key in enumerate(labels):
        if time[r] == 0 and calls[r] == 0 and kernels[r] == 0:
            continue
        rows[key] = OpStats(
            calls=calls[r] / used,
            time=time[r] / used,
            host_time=host_time[r] / used,
            cpu_time=cpu_time[r] / used,
            self_time=self_time[r] / used,
            device_time=device_time[r] / used,
            kernels=kernels[r] / used,
            copies=copy_count[r] / used,
            transfers=transfers[r] / used,
            comm=bool(comm_kernel[r] or _is_comm(key[1])),
            shapes=first_dims.get(r, ""),
            per_step=time_by_step[r].tolist(),
        )
    return TraceProfile(
        path=str(trace.path),
        device=trace.device_name(),
        has_device=bool(len(device)),
        steps=n_steps,
        step_source=step_source,
        total=float(step_time[kept].sum()) / used,
        events=trace.event_count,
        rows=rows,
        steps_used=steps_used,
        kept_steps=used,
        step_times=step_time.tolist(),
    )


def _step_edges(step_start, step_end, launched, finished):
    """[start0, end0, start1, end1, ...]: each step's range, sorted, never overlapping the next one.

    A step ends where its host range ends or, later, where the device work launched in it
    ends (`launched`/`finished`: launch and end time of each device event); never after the
    next step starts. Time between steps (the profiler's bookkeeping, or another program's
    steps) belongs to no step. Steps of no length are dropped.
    """
    import numpy as np

    step_end = step_end.copy()
    step = np.searchsorted(step_start, launched, side="right") - 1
    inside = step >= 0
    inside[inside] = launched[inside] < step_end[step[inside]]
    np.maximum.at(step_end, step[inside], finished[inside])
    step_end[:-1] = np.minimum(step_end[:-1], step_start[1:])
    keep = step_end > step_start
    if not keep.any():  # nothing but instants: one step of no length still needs an edge pair
        keep[0] = True
    edges = np.empty(2 * int(keep.sum()))
    edges[0::2], edges[1::2] = step_start[keep], step_end[keep]
    return edges


_NEST_CHUNK = 1 << 16  # host events turned into Python values at a time (bounds the memory of the walk)


def _nest(trace: tr.Trace, start, end, host, flow_starts):
    """Walk each host thread's events in start order with a stack of open ranges.

    Returns per event: its top-level op (CPU ops and launches; -1 otherwise) and, for
    CPU ops, its scope (interned in the returned scope strings); the summed length of
    each event's direct children; the nested copy/cast ops under each top-level op;
    and the top-level op open where each flow starts (torch_npu's links).
    """
    import numpy as np

    kind, names, strings = trace.kind, trace.name, trace.strings
    n = len(trace)
    flows = trace.flows
    seq_track = np.concatenate([trace.track[host], flows["track"][flow_starts]])
    seq_ts = np.concatenate([start[host], flows["ts"][flow_starts]])
    seq_dur = np.concatenate([trace.dur[host], np.zeros(len(flow_starts))])
    seq_id = np.concatenate([host, n + np.arange(len(flow_starts))]).astype(np.int32)
    order = np.lexsort((-seq_dur, seq_ts, seq_track)).astype(np.int32)
    del seq_dur

    scope_strings: list[str] = [""]
    scope_ids: dict[str, int] = {"": 0}

    def scope_code(text: str) -> int:
        code = scope_ids.get(text)
        if code is None:
            code = scope_ids[text] = len(scope_strings)
            scope_strings.append(text)
        return code

    parent_of = np.full(len(order), -1, dtype=np.int32)  # by position in `order`
    top_at = np.full(len(order), -1, dtype=np.int32)
    scope_at = np.full(len(order), -1, dtype=np.int32)
    stack: list[tuple[float, int, int, int]] = []  # (end, top op, scope, event)
    current = -1
    for c0 in range(0, len(order), _NEST_CHUNK):
        at = order[c0 : c0 + _NEST_CHUNK]
        ids = seq_id[at]
        real = ids < n
        safe = np.where(real, ids, 0)
        parents: list[int] = []
        tops: list[int] = []
        scopes: list[int] = []
        for i, t, s, k, e, label in zip(
            ids.tolist(),
            seq_track[at].tolist(),
            seq_ts[at].tolist(),
            np.where(real, kind[safe], tr.FLOW_START).tolist(),
            np.where(real, end[safe], 0.0).tolist(),
            names[safe].tolist(),
            strict=True,
        ):
            if t != current:
                stack.clear()
                current = t
            while stack and stack[-1][0] <= s:
                stack.pop()
            if stack:
                _, parent_top, parent_scope, parent = stack[-1]
            else:
                parent_top, parent_scope, parent = -1, 0, -1
            parents.append(parent)
            if k == tr.CPU_OP:
                top = parent_top if parent_top >= 0 else i
                tops.append(top)
                scopes.append(parent_scope)
                stack.append((e, top, parent_scope, i))
                continue
            tops.append(parent_top if k in (tr.LAUNCH, tr.FLOW_START) else -1)
            scopes.append(-1)
            if k == tr.LAUNCH:
                stack.append((e, parent_top, parent_scope, i))
            elif k == tr.MODULE:
                text = strings[label]
                if text.startswith(tr.TORCH_MODULE_PREFIX):
                    text = text[len(tr.TORCH_MODULE_PREFIX) :]
                    text = f"{scope_strings[parent_scope]}/{text}" if parent_scope else text
                stack.append((e, parent_top, scope_code(text), i))
            elif k == tr.ANNOTATION:
                text = strings[label]
                text = f"{scope_strings[parent_scope]} / {text}" if parent_scope else text
                stack.append((e, parent_top, scope_code(text), i))
            elif k != tr.FLOW_START:  # STEP and anything else that only nests
                stack.append((e, parent_top, parent_scope, i))
        parent_of[c0 : c0 + len(parents)] = parents
        top_at[c0 : c0 + len(tops)] = tops
        scope_at[c0 : c0 + len(scopes)] = scopes

    ids = seq_id[order]
    del seq_id, seq_track, seq_ts, order
    real = ids < n
    flow_owner = np.full(len(flow_starts), -1, dtype=np.int64)
    flow_owner[ids[~real] - n] = top_at[~real]
    ids, parent_of, top_at, scope_at = ids[real], parent_of[real], top_at[real], scope_at[real]
    top_of = np.full(n, -1, dtype=np.int32)
    top_of[ids] = top_at
    scope_of = np.full(n, -1, dtype=np.int32)
    scope_of[ids] = scope_at
    del top_at, scope_at
    nested = parent_of >= 0
    child_sum = np.bincount(parent_of[nested], weights=np.maximum(trace.dur[ids[nested]], 0.0), minlength=n)
    copy_ids = np.array([s in COPY_OPS for s in strings], dtype=bool)
    is_copy = (kind == tr.CPU_OP) & (top_of >= 0) & (top_of != np.arange(n)) & copy_ids[names]
    copies = np.bincount(top_of[is_copy], minlength=n).astype(float)
    return top_of, scope_of, child_sum, copies, flow_owner, scope_strings


def _attribute(edges, start, end, tops, device, row_of_top, dev_row, idle_row: int, n_rows: int):
    """Split the instants of every step among rows; return each row's time in each step.

    `edges` cut the window into slots (slot 2k is step k, slot 2k+1 the time before the
    next step, which counts for no row). Returns (time, host time), each an array of
    rows x steps: each step's instants are split in full, so a step's column adds up to
    its length.
    """
    import numpy as np

    n_steps = len(edges) // 2
    keep = np.zeros(len(edges) - 1, dtype=bool)
    keep[0::2] = True
    w0, w1 = float(edges[0]), float(edges[-1])
    d_s, d_e = np.clip(start[device], w0, w1), np.clip(end[device], w0, w1)
    t_s, t_e = np.clip(start[tops], w0, w1), np.clip(end[tops], w0, w1)
    bounds = np.unique(np.concatenate([d_s, d_e, t_s, t_e, edges]))
    seg = np.diff(bounds)
    seg_step = (np.searchsorted(edges, bounds[:-1], side="right") - 1).astype(np.int32)  # step of each segment
    edge_seg = np.searchsorted(bounds, edges)  # first segment of each step (and the end)

    def active(s, e):
        si = np.searchsorted(bounds, s).astype(np.int32)
        ei = np.searchsorted(bounds, e).astype(np.int32)
        count = np.bincount(si, minlength=len(bounds)) - np.bincount(ei, minlength=len(bounds))
        return np.cumsum(count[:-1], dtype=np.int32), si, ei

    def in_steps(rows, si, ei, weight):
        # An event's share of segments [si, ei) is cum[ei] - cum[si]; one spanning a step edge
        # is cut there, and only its pieces inside steps count.
        cum = np.concatenate([[0.0], np.cumsum(weight)])
        first = seg_step[np.minimum(si, len(seg) - 1)]
        last = seg_step[np.maximum(ei - 1, 0)]
        pieces = np.where(ei > si, last - first + 1, 0)
        event = np.repeat(np.arange(len(si), dtype=np.int32), pieces)
        step = first[event] + (np.arange(len(event)) - np.repeat(np.cumsum(pieces) - pieces, pieces))
        event, step = event[keep[step]], step[keep[step]]
        lo = np.maximum(si[event], edge_seg[step])
        hi = np.minimum(ei[event], edge_seg[step + 1])
        cell = rows[event].astype(np.int64) * n_steps + step // 2
        return np.bincount(cell, weights=cum[hi] - cum[lo], minlength=n_rows * n_steps).reshape(n_rows, n_steps)

    # Device work owns the instants it runs in (shared by concurrent kernels); host ops own
    # the instants when the device is idle; the rest is idle time. Temporaries are dropped
    # as soon as they are used: for millions of events each is tens of MB.
    d_count, d_si, d_ei = active(d_s, d_e)
    del d_s, d_e
    t_count, t_si, t_ei = active(t_s, t_e)
    del t_s, t_e
    device_idle = d_count <= 0
    idle = device_idle & (t_count <= 0) & keep[seg_step]
    idle_time = np.bincount(seg_step[idle] // 2, weights=seg[idle], minlength=n_steps)
    del idle
    host = in_steps(row_of_top, t_si, t_ei, np.where(device_idle & (t_count > 0), seg / np.maximum(t_count, 1), 0.0))
    del t_count, t_si, t_ei, device_idle
    time = host + in_steps(dev_row, d_si, d_ei, np.where(d_count > 0, seg / np.maximum(d_count, 1), 0.0))
    time[idle_row] += idle_time
    return time, host


def _kept_steps(step_time, steps_used: str):
    """Indices of the steps the figures are averaged over (see STEPS_USED)."""
    import numpy as np

    if steps_used not in STEPS_USED:
        raise ValueError(f"steps_used must be one of {', '.join(STEPS_USED)}, not {steps_used!r}")
    order = np.argsort(step_time, kind="stable")
    if steps_used == ALL_STEPS:
        return np.sort(order)
    return np.sort(order[: (len(order) + 1) // 2])


def _row_keys(trace: tr.Trace, tops, scope_of, scope_strings: list[str]):
    """The row of each top-level op, and the (module, op) key of each row, in order of first call.

    A backward node (`autograd::engine::evaluate_function: MmBackward0`) is named by its node
    and takes the scope of the forward op with the same autograd sequence number.
    """
    import numpy as np

    strings = trace.strings
    label = trace.name[tops].astype(np.int64)
    scope = scope_of[tops].astype(np.int64)
    backward = np.array([s.startswith(BACKWARD_PREFIX) for s in strings], dtype=bool)[label]
    if backward.any():
        want = trace.seq[tops[backward]]
        seqs, scopes = _forward_scopes(trace, scope_of, want[want >= 0])
        if len(seqs):
            pos = np.clip(np.searchsorted(seqs, want), 0, len(seqs) - 1)
            hit = (seqs[pos] == want) & (want >= 0)
            moved = scope[backward]
            moved[hit] = scopes[pos[hit]]
            scope[backward] = moved
    width = len(scope_strings) + 1
    codes, first, row_of_top = np.unique(label * width + scope + 1, return_index=True, return_inverse=True)
    keys: list[tuple[str, str]] = []
    key_ids: dict[tuple[str, str], int] = {}
    row_of_code = np.zeros(len(codes), dtype=np.int64)
    for c in np.argsort(first, kind="stable").tolist():
        label_id, scope_id = divmod(int(codes[c]), width)
        text = strings[label_id]
        if text.startswith(BACKWARD_PREFIX):
            text = text[len(BACKWARD_PREFIX) :]
        key = (scope_strings[scope_id - 1] if scope_id > 0 else "", text)
        row = key_ids.get(key)
        if row is None:
            row = key_ids[key] = len(keys)
            keys.append(key)
        row_of_code[c] = row
    return row_of_code[row_of_top.reshape(-1)], keys


def _forward_scopes(trace: tr.Trace, scope_of, wanted):
    """(sequence numbers, scopes): for each autograd sequence number in `wanted`, the scope
    of the first forward op that recorded it; both arrays sorted by sequence number."""
    import numpy as np

    candidates = np.nonzero((trace.kind == tr.CPU_OP) & np.isin(trace.seq, wanted))[0]
    backward_name = np.array(
        [s.startswith("autograd::") or "Backward" in s for s in trace.strings], dtype=bool
    )
    candidates = candidates[~backward_name[trace.name[candidates]]]
    candidates = candidates[np.argsort(trace.ts[candidates], kind="stable")]
    seqs, first = np.unique(trace.seq[candidates], return_index=True)
    return seqs, scope_of[candidates[first]].astype(np.int64)


def _link_by_flows(trace: tr.Trace, device, owner, flow_starts, flow_owner) -> None:
    """torch_npu and other traces without correlation ids: follow s -> f flow pairs."""
    import numpy as np

    flows = trace.flows
    # A flow is (category, id): ac2g and async_npu number their flows independently.
    keys = zip(flows["cat"][flow_starts].tolist(), flows["id"][flow_starts].tolist(), strict=True)
    start_owner = dict(zip(keys, flow_owner.tolist(), strict=True))
    ends = np.nonzero(flows["start"] == 0)[0]
    position: dict[tuple[int, float], int] = {}
    for j, (t, s) in enumerate(zip(trace.track[device].tolist(), trace.ts[device].tolist(), strict=True)):
        position.setdefault((t, round(s, 3)), j)
    for f in ends.tolist():
        j = position.get((int(flows["track"][f]), round(float(flows["ts"][f]), 3)))
        if j is not None and owner[j] < 0:
            owner[j] = start_owner.get((int(flows["cat"][f]), int(flows["id"][f])), -1)


def profile_trace(path: str | Path, steps_used: str = FASTER_HALF) -> TraceProfile:
    return summarize(tr.load_trace(path), steps_used)


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


def _rank_sum_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided p-value of the Mann-Whitney U test of samples a and b.

    The normal approximation with the tie correction and a continuity correction
    (Mann & Whitney 1947; the tie term as in Lehmann, Nonparametrics, 1975). Rank-based:
    one preempted step weighs no more than any other step that is merely the largest.
    """
    n1, n2 = len(a), len(b)
    n = n1 + n2
    if n1 == 0 or n2 == 0:
        return 1.0
    ordered = sorted([(v, 0) for v in a] + [(v, 1) for v in b])
    rank_sum_a = 0.0
    ties = 0.0
    i = 0
    while i < n:
        j = i
        while j + 1 < n and ordered[j + 1][0] == ordered[i][0]:
            j += 1
        average = (i + j) / 2 + 1
        rank_sum_a += average * sum(1 for k in range(i, j + 1) if ordered[k][1] == 0)
        ties += (j - i + 1) ** 3 - (j - i + 1)
        i = j + 1
    u = rank_sum_a - n1 * (n1 + 1) / 2
    variance = n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1)))
    if variance <= 0:
        return 1.0
    z = max(abs(u - n1 * n2 / 2) - 0.5, 0.0) / math.sqrt(variance)
    return math.erfc(z / math.sqrt(2))


def _significance(base: TraceProfile, test: TraceProfile, b: OpStats | None, t: OpStats | None,
                  why: tuple[str, ...], noise_floor: float, tests: int) -> tuple[str, float | None]:
    """How sure the row's change is: (STRUCTURAL | SIGNIFICANT | NOISE | UNKNOWN, p-value).

    An op that appears, goes or changes its call count is a structural change: no noise
    makes one. A changed time is compared step by step: the row's time in each profiled
    step of one side against the other's, and its share of each step likewise. Both
    must differ (rank-sum test, Bonferroni-corrected over the rows tested, so that an
    identical pair shows a significant row with probability below FAMILY_ALPHA), and the
    change of the median step must pass the noise floor and RELATIVE_NOISE. Time alone is not enough: a
    machine that is busier while one side is captured makes every row slower but leaves
    their shares where they were; share alone is not enough either: one op that gets
    slower shrinks the share of every other.
    """
    if STRUCTURAL_TAGS.intersection(why):
        return STRUCTURAL, 0.0
    if b is None or t is None or min(len(b.per_step), len(t.per_step)) < MIN_STEPS:
        return UNKNOWN, None
    if len(b.per_step) != len(base.step_times) or len(t.per_step) != len(test.step_times):
        return UNKNOWN, None
    p_time = _rank_sum_p(b.per_step, t.per_step)
    p_share = _rank_sum_p([x / s for x, s in zip(b.per_step, base.step_times, strict=True) if s > 0],
                          [x / s for x, s in zip(t.per_step, test.step_times, strict=True) if s > 0])
    p = max(p_time, p_share)
    # The size of the change from the medians of the steps: a few steps hit by interference
    # (an op 50x slower while another process held the core) move a mean, not a median.
    b_mid, t_mid = statistics.median(b.per_step), statistics.median(t.per_step)
    delta = t_mid - b_mid
    large = abs(delta) >= noise_floor and abs(delta) > RELATIVE_NOISE * max(b_mid, t_mid)
    b_steps, t_steps = statistics.median(base.step_times), statistics.median(test.step_times)
    same_way = b_steps > 0 and t_steps > 0 and (t_mid / t_steps - b_mid / b_steps) * delta > 0
    return (SIGNIFICANT if p < FAMILY_ALPHA / max(tests, 1) and large and same_way else NOISE), p


def _least(stats: OpStats | None) -> float:
    """A row's time in its fastest step: interference only ever adds time, so this is its own cost."""
    if stats is None:
        return 0.0
    return min(stats.per_step) if stats.per_step else stats.time


def _structural_size(row: DiffRow) -> float:
    """How much a structural change costs, from each side's fastest step.

    Not the delta of the averaged steps: a cheap new op (a slice) that was preempted in
    many steps would outrank the costly one next to it.
    """
    return abs(_least(row.test) - _least(row.base))


def _tier(row: DiffRow) -> int:
    """Rank of a row's kind of change: structural first, then significant (or untestable), then noise."""
    return {STRUCTURAL: 0, SIGNIFICANT: 1, UNKNOWN: 1}.get(row.significance, 2)


def diff(base: TraceProfile, test: TraceProfile) -> ProfileDiff:
    """Rows of (module, op) with their delta, why-tags and significance, most telling first.

    Rows are ranked by the kind of change (`_tier`: structural, then significant, then
    noise), then structural rows by the size of their delta and the others by their delta
    in the direction of the total change, so that a new op is never ranked below an
    existing op whose time only wobbles.
    """
    if base.steps_used != test.steps_used:
        raise ValueError(f"both sides must average the same steps (base: {base.steps_used}, test: {test.steps_used})")
    total = test.total - base.total
    keys = list(base.rows)
    keys += [k for k in test.rows if k not in base.rows]
    floor = NOISE_SHARE * base.total
    tagged = []
    for key in keys:
        b, t = base.rows.get(key), test.rows.get(key)
        tagged.append((key, b, t, _why(b, t, test.has_device, key, floor)))
    tests = sum(1 for _, b, t, why in tagged if b is not None and t is not None and not STRUCTURAL_TAGS.intersection(why))
    rows = []
    for key, b, t, why in tagged:
        delta = (t.time if t else 0.0) - (b.time if b else 0.0)
        significance, p_value = _significance(base, test, b, t, why, floor, tests)
        rows.append(
            DiffRow(
                module=key[0],
                op=key[1],
                base=b,
                test=t,
                delta=delta,
                share=delta / total if total else 0.0,
                why=why,
                significance=significance,
                p_value=p_value,
            )
        )
    direction = 1.0 if total >= 0 else -1.0
    # Structural rows by their size whatever the sign of the total (a new op is news even when
    # noise made the test side faster overall); the others in the direction of the total change.
    rows.sort(key=lambda r: (_tier(r), -_structural_size(r) if _tier(r) == 0 else -direction * r.delta, r.module, r.op))
    return ProfileDiff(base=base, test=test, rows=rows)


def diff_traces(base: str | Path, test: str | Path, steps_used: str = FASTER_HALF) -> ProfileDiff:
    """Load two traces and diff them (the library call behind `accelport profile-diff`)."""
    return diff(*profile_traces([base, test], steps_used))


def profile_traces(paths: Sequence[str | Path], steps_used: str = FASTER_HALF) -> list[TraceProfile]:
    """`profile_trace` of each path; large traces are read at the same time, one per core.

    Reading a trace is CPU-bound Python, so the first trace is read here while the
    others are read in worker processes; each worker returns its small summary,
    never the columns. Below PARALLEL_BYTES in all, a worker costs more than it saves.
    """
    sizes = [Path(p).stat().st_size if Path(p).is_file() else 0 for p in paths]
    workers = min(len(paths) - 1, (os.cpu_count() or 1) - 1)
    if workers < 1 or sum(sizes) < PARALLEL_BYTES or not all(sizes):
        return [profile_trace(p, steps_used) for p in paths]
    tr.check_dependencies()  # a missing package is reported here, not from inside a worker
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    # spawn, not fork: the caller may hold threads (torch's pools) that a fork would copy mid-lock.
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        others = [pool.submit(profile_trace, p, steps_used) for p in paths[1:]]
        first = profile_trace(paths[0], steps_used)
        try:
            return [first, *(future.result() for future in others)]
        except BrokenProcessPool:
            log.warning("a trace-reading worker died (out of memory?); reading the traces one after the other")
    return [first, *(profile_trace(p, steps_used) for p in paths[1:])]


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


def format_ms(us: float | None) -> str:
    return "-" if us is None else f"{us / 1000.0:.3f}"


def describe_sides(result: ProfileDiff) -> list[tuple[str, str]]:
    def side(p: TraceProfile) -> str:
        where = p.device or ("host only" if not p.has_device else "device")
        if p.kept_steps < p.steps:
            steps = (f"{p.kept_steps} of {p.steps} steps from {p.step_source} ({p.steps_used}; "
                     f"all steps: {format_ms(p.all_steps_total)} ms)")
        else:
            steps = f"{p.steps} step(s) from {p.step_source}"
        return f"{p.path} ({where}; {steps}; {p.events} events)"

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
        _change(row),
    ]


def _change(row: DiffRow) -> str:
    """The significance cell: what kind of change the row is, and how sure."""
    if row.significance == SIGNIFICANT and row.p_value is not None:
        return f"significant (p={row.p_value:.1g})"
    return "-" if row.significance == UNKNOWN else row.significance


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
    "change",
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
    page.paragraph(significance_line(result))
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
    lines.append(significance_line(result))
    return "\n".join(lines) + "\n\n" + text_table(ROW_HEADERS, as_rows(top_rows(result, limit)))


def significance_line(result: ProfileDiff) -> str:
    """One sentence on which rows are real changes and which are noise."""
    count = {kind: sum(1 for r in result.rows if r.significance == kind) for kind in (STRUCTURAL, SIGNIFICANT, NOISE, UNKNOWN)}
    if count[UNKNOWN] and not (count[SIGNIFICANT] or count[NOISE]):
        steps = min(result.base.steps, result.test.steps)
        timing = (f"changed times not tested: {steps} step(s) per side, a per-step comparison needs "
                  f"{MIN_STEPS} (profile more steps, e.g. `accelport profile --steps {max(MIN_STEPS, 8)}`)")
    else:
        timing = (f"{count[SIGNIFICANT]} row(s) changed significantly across the steps, "
                  f"{count[NOISE]} within noise (family-wise alpha {FAMILY_ALPHA})")
    return f"changes: {count[STRUCTURAL]} structural (ops added, gone or called a different number of times); {timing}"


def render_single(profile: TraceProfile, limit: int = 15) -> str:
    """The breakdown of one trace: its largest rows."""
    from accelport.report.table import text_table

    rows = sorted(profile.rows.items(), key=lambda item: -item[1].time)
    shown = [
        [key[0] or "-", key[1], f"{s.calls:.3g}", format_ms(s.time), f"{s.time / profile.total * 100:.1f}%" if profile.total else "-",
         f"{s.kernels_per_call:.3g}", s.shapes[:48]]
        for key, s in rows[:limit]
    ]
    used = f"the {profile.steps_used} ({profile.kept_steps}) of " if profile.kept_steps < profile.steps else ""
    head = f"{profile.path}: {format_ms(profile.total)} ms per step over {used}{profile.steps} step(s) ({profile.step_source})\n\n"
    return head + text_table(["module", "op", "calls", "ms/step", "share", "kernels/call", "input shapes"], shown)


# --------------------------------------------------------------------------- `accelport profile -- python script.py`


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


if __name__ == "__main__":
    import sys

    sys.exit(_child(sys.argv[1:]))
