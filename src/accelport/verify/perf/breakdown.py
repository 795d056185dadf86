"""Where did the time go: per-op breakdown of one profiler trace.

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

import logging
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from accelport.verify.perf import trace as tr

log = logging.getLogger(__name__)

IDLE_OP = "(no op running)"
ORPHAN_OP = "(device work without a launching op)"
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

# Traces larger than this in all are read in parallel processes (see profile_traces).
PARALLEL_BYTES = 32 << 20

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
    captures: list[str] = field(default_factory=list)  # the trace of each capture, when several make one side

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
            "captures": self.captures or [self.path],
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


_WEIGHTED = ("calls", "time", "host_time", "cpu_time", "self_time", "device_time", "kernels", "copies", "transfers")


def merge_captures(profiles: Sequence[TraceProfile]) -> TraceProfile:
    """Several captures of one program as one side: each figure the mean over every kept step.

    Each capture keeps its own steps (the faster half of its own, by default), so a
    capture taken while the machine was busier does not lose all its steps to the
    others. A row missing from a capture ran for no time in that capture's steps.
    """
    if len(profiles) == 1:
        return profiles[0]
    if not profiles:
        raise ValueError("no capture to merge")
    used = {p.steps_used for p in profiles}
    if len(used) > 1:
        raise ValueError(f"captures average different steps ({', '.join(sorted(used))})")
    kept = sum(p.kept_steps for p in profiles)
    keys = list(dict.fromkeys(key for p in profiles for key in p.rows))
    rows = {}
    for key in keys:
        present = [(p, p.rows.get(key)) for p in profiles]
        merged = OpStats(
            **{name: sum(getattr(s, name) * p.kept_steps for p, s in present if s) / kept for name in _WEIGHTED},
            comm=any(s.comm for _, s in present if s),
            shapes=next((s.shapes for _, s in present if s and s.shapes), ""),
            per_step=[x for p, s in present for x in (s.per_step if s else [0.0] * len(p.step_times))],
        )
        rows[key] = merged
    devices = list(dict.fromkeys(p.device for p in profiles))
    sources = list(dict.fromkeys(p.step_source for p in profiles))
    return TraceProfile(
        path=profiles[0].path,
        device=", ".join(devices),
        has_device=any(p.has_device for p in profiles),
        steps=sum(p.steps for p in profiles),
        step_source=", ".join(sources),
        total=sum(p.total * p.kept_steps for p in profiles) / kept,
        events=sum(p.events for p in profiles),
        rows=rows,
        steps_used=profiles[0].steps_used,
        kept_steps=kept,
        step_times=[t for p in profiles for t in p.step_times],
        captures=[p.path for p in profiles],
    )


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

