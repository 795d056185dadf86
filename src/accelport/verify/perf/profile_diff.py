"""The diff of two trace breakdowns: rows matched by (module, op), their why-tags, how sure each change is, and their ranking."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accelport.verify.perf.breakdown import (
    FASTER_HALF,
    IDLE_OP,
    OpStats,
    TraceProfile,
    profile_traces,
)

OTHER_OP = "(other rows)"

# Why-tag thresholds: small changes are noise, not a reason.
RELATIVE_NOISE = 0.10
HOST_BOUND_SHARE = 0.5
NOISE_SHARE = 0.005  # a row that moved less than 0.5% of the step time gets no "slower" tag

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


