"""The diff of two trace breakdowns: rows matched by (module, op), their why-tags, how sure each change is, and their ranking."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accelport.verify.perf import replicates
from accelport.verify.perf.breakdown import (
    FASTER_HALF,
    IDLE_OP,
    OpStats,
    TraceProfile,
    merge_captures,
    profile_traces,
)

OTHER_OP = "(other rows)"

# Why-tag thresholds: small changes are noise, not a reason.
RELATIVE_NOISE = 0.10
HOST_BOUND_SHARE = 0.5
NOISE_SHARE = 0.005  # a row that moved less than 0.5% of the step time gets no "slower" tag

# How sure a diff row is (see `_significance`): a structural change (an op appears, goes or
# changes its call count) is certain; a changed time is significant when it is beyond what
# rows move between two captures of the same program (see `_between_captures`).
STRUCTURAL = "structural"
SIGNIFICANT = "significant"
NOISE = "noise"
UNKNOWN = "unknown"  # too few steps on a side, or too few rows, to tell
FAMILY_ALPHA = 0.001  # chance that a pair of identical programs shows any significant row (see `_significance`)
MIN_STEPS = 4  # per side, for a per-step comparison
MIN_ROWS = 3  # rows tested together: a row's change is judged against the spread of the others'
LOW_QUANTILE = 0.25  # a row's time in a capture: the lower quartile of its steps (see `_row_change`)
MAX_DF = 1000  # Student's t beyond this is the normal to the precision that matters here
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
    p_value: float | None = None  # of the between-captures test (`_between_captures`), uncorrected

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
    # test/base of the median row tested for significance: the shift the whole capture took
    # (a busier machine, a faster device), which no single row is blamed for; None when untested
    shift: float | None = None
    captures: tuple[int, int] = (1, 1)  # captures of the base side and of the test side

    @property
    def replicated(self) -> bool:
        """Whether each row's own drift between captures was measured (`_between_replicates`), not assumed."""
        return _replicated(self.captures)

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
            "capture_shift": self.shift,
            "captures": {"base": self.captures[0], "test": self.captures[1]},
            "significance_test": "own drift between captures" if self.replicated else "against the other rows' changes",
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


def _quantile(ordered: Sequence[float], q: float) -> float:
    """The q-quantile of sorted values, interpolated between the two nearest."""
    at = q * (len(ordered) - 1)
    low = math.floor(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def _quantile_error(ordered: Sequence[float], q: float) -> float:
    """Standard error of the q-quantile of sorted values, free of any assumed distribution.

    How many of n values fall below the true quantile is binomial(n, q); the values whose
    ranks lie one binomial standard deviation either side of n*q bracket it about as one
    standard error does a mean, so half their distance is the error. A side whose slow
    steps reach into the quartile gets a wide bracket and counts as the noisy side it is.
    """
    n = len(ordered)
    spread = math.sqrt(n * q * (1 - q))
    low = max(0, math.floor(n * q - spread))
    high = min(n - 1, math.ceil(n * q + spread) - 1)
    return (ordered[high] - ordered[low]) / 2


def _t_two_sided_p(t: float, df: int) -> float:
    """P(|T| >= |t|) for Student's t with `df` (a positive integer) degrees of freedom.

    The finite series of Abramowitz & Stegun 26.7.3 (odd df) and 26.7.4 (even df).
    """
    theta = math.atan(abs(t) / math.sqrt(df))
    cos2, sin = math.cos(theta) ** 2, math.sin(theta)
    if df % 2:
        term = total = math.cos(theta) if df > 1 else 0.0
        for k in range(3, df - 1, 2):
            term *= cos2 * (k - 1) / k
            total += term
        inside = 2 / math.pi * (theta + sin * total)
    else:
        term = total = 1.0
        for k in range(2, df - 1, 2):
            term *= cos2 * (k - 1) / k
            total += term
        inside = sin * total
    return min(1.0, max(0.0, 1.0 - inside))


@dataclass(frozen=True)
class RowChange:
    """How one row's time moved from the base capture to the test capture, on a log scale."""

    log_ratio: float  # log(test / base) of the row's lower quartile over each side's steps
    error: float  # its standard error, from the spread of each side's steps
    base: float  # the row's lower quartile over the base steps, microseconds
    test: float  # and over the test steps

    @property
    def delta(self) -> float:
        return self.test - self.base


def _row_change(b: OpStats, t: OpStats, offset: float) -> RowChange:
    """The row's change from its lower quartile over each side's steps.

    Interference only ever adds time to a step, and on a loaded machine it can hit more
    than half of them (an op preempted in 9 of 12 steps): a quartile still sees the op's
    own cost where a median does not. `offset` (the noise floor) is added to every step
    before the log, so that a row of a few microseconds cannot move by a large factor.
    """
    low_base, error_base = _log_low_quartile(b.per_step, offset)
    low_test, error_test = _log_low_quartile(t.per_step, offset)
    return RowChange(
        log_ratio=low_test - low_base,
        error=math.hypot(error_base, error_test),
        base=_quantile(sorted(b.per_step), LOW_QUANTILE),
        test=_quantile(sorted(t.per_step), LOW_QUANTILE),
    )


def _log_offset(offset: float) -> float:
    return max(offset, 1e-9)  # never log(0), even for a trace whose steps have no length


def _log_low_quartile(per_step: Sequence[float], offset: float) -> tuple[float, float]:
    """(lower quartile, its standard error) of log(step time + offset) over the given steps."""
    logs = sorted(math.log(max(x, 0.0) + _log_offset(offset)) for x in per_step)
    return _quantile(logs, LOW_QUANTILE), _quantile_error(logs, LOW_QUANTILE)


def _between_captures(changes: dict[tuple[str, str], RowChange]) -> dict[tuple[str, str], tuple[float, float]]:
    """(p-value, change beyond the other rows') of each row: is its change more than rows move between captures?

    Two captures of the same program differ by more than their steps do: the machine is
    busier or quieter during one of them (every row moves together), and it does not move
    every op alike (on a shared 2-core CPU, gelu ran 3.6x slower in every step of one of two
    captures, its linears 2x, the other ops not at all). Steps within one capture cannot show
    that; the other rows of the same pair can. So each row's log change d is tested against
    the m other rows' log changes: their mean is the shift the whole capture took, and their
    variance, less the mean squared error ē² their own steps explain, is tau², how far a row
    of an identical pair strays from that shift. The statistic is the row's externally
    studentized deviation, (d - mean) / sqrt(tau² (1 + 1/m) + e² + ē²/m), with e the row's
    own error from its steps; it is taken as Student's t with m - 1 degrees of freedom, as
    when the rows' changes scatter normally around the shift (the Bonferroni outlier test
    of regression). A real change in one op stands out of that spread; a machine-wide
    slowdown moves the mean, not the row; and in a pair where the machine moved several ops
    far, the spread is wide and one more far-moved op is no surprise.
    """
    found = {}
    for key, change in changes.items():
        others = [c for other, c in changes.items() if other != key]
        m = len(others)
        if m < MIN_ROWS - 1:
            continue
        shift = statistics.fmean(c.log_ratio for c in others)
        spread = statistics.variance([c.log_ratio for c in others], shift)
        noise = statistics.fmean(c.error**2 for c in others)  # the part of the spread the steps explain
        between = max(spread - noise, 0.0)
        scale = math.sqrt(between * (1 + 1 / m) + change.error**2 + noise / m)
        excess = change.log_ratio - shift
        if scale <= 0:
            found[key] = (1.0 if excess == 0 else 0.0, excess)
            continue
        found[key] = (_t_two_sided_p(excess / scale, m - 1), excess)
    return found


def _capture_values(stats: OpStats, captures: Sequence[TraceProfile], offset: float) -> list[tuple[float, float]]:
    """(log lower quartile, its standard error) of a merged row in each capture, from that capture's steps."""
    values, at = [], 0
    for capture in captures:
        values.append(_log_low_quartile(stats.per_step[at: at + len(capture.step_times)], offset))
        at += len(capture.step_times)
    return values


def _replicated_change(base: list[tuple[float, float]], test: list[tuple[float, float]], offset: float) -> RowChange:
    """A row's change over several captures per side: the geometric mean of its captures' lower quartiles.

    Not the quartile of all a side's steps pooled: a row slowed in one capture of three
    would hide behind the other captures' fast steps there, and the change the test
    weighs (`_between_replicates`) is one of capture means.
    """
    offset = _log_offset(offset)
    low_base = statistics.fmean(y for y, _ in base)
    low_test = statistics.fmean(y for y, _ in test)
    return RowChange(
        log_ratio=low_test - low_base,
        error=math.hypot(math.sqrt(statistics.fmean(e**2 for _, e in base) / len(base)),
                         math.sqrt(statistics.fmean(e**2 for _, e in test) / len(test))),
        base=math.exp(low_base) - offset,
        test=math.exp(low_test) - offset,
    )


def _between_replicates(values: dict[tuple[str, str], tuple[list[tuple[float, float]], list[tuple[float, float]]]]
                        ) -> dict[tuple[str, str], tuple[float, float]]:
    """(p-value, change beyond the capture-wide shift) of each row, from several captures per side.

    With one capture per side, how far a row strays between captures can only be
    assumed from the other rows (`_between_captures`), and a row the machine alone moved
    in that one capture passes for a regression. With several, each row's own drift is
    measured. Per capture, the shift every row took (the median over rows of each row's
    deviation from its mean over all captures) is taken out; a row's change is then the
    mean of its test captures less the mean of its base captures, and its variance the
    pooled variance of its captures within each side (never below the mean squared
    error of its captures' quartiles, which their own steps already show). That
    variance, on (captures - 2) degrees of freedom, is moderated towards the rows' shared
    one (`replicates`, the empirical Bayes t of Smyth 2004): a row that drifted in one
    capture keeps its wide variance, rows that agree lend each other strength.
    """
    keys = list(values)
    if len(keys) < MIN_ROWS:
        return {}
    k_base, k_test = len(values[keys[0]][0]), len(values[keys[0]][1])
    df = k_base + k_test - 2
    series = {key: [y for y, _ in values[key][0] + values[key][1]] for key in keys}
    means = {key: statistics.fmean(ys) for key, ys in series.items()}
    shifts = [statistics.median(series[key][c] - means[key] for key in keys) for c in range(k_base + k_test)]
    changes, variances = {}, {}
    for key in keys:
        z = [y - shift for y, shift in zip(series[key], shifts, strict=True)]
        base, test = z[:k_base], z[k_base:]
        changes[key] = statistics.fmean(test) - statistics.fmean(base)
        pooled = sum((x - statistics.fmean(side)) ** 2 for side in (base, test) for x in side) / df
        measured = statistics.fmean(e**2 for _, e in values[key][0] + values[key][1])
        variances[key] = max(pooled, measured, 1e-12)
    d0, s0_squared = replicates.fit_prior(list(variances.values()), df)
    found = {}
    for key in keys:
        variance, degrees = replicates.moderated(variances[key], df, d0, s0_squared)
        t = changes[key] / math.sqrt(variance * (1 / k_base + 1 / k_test))
        found[key] = (_t_two_sided_p(t, int(min(degrees, MAX_DF))), changes[key])
    return found


def _both(across_rows: dict[tuple[str, str], tuple[float, float]], own: dict[tuple[str, str], tuple[float, float]]
          ) -> dict[tuple[str, str], tuple[float, float]]:
    """A row's change must stand out of how the other rows moved and of how it moved between its own captures.

    Each test has its own blind spot: the rows' spread cannot see that one row drifted in
    one capture (`_between_captures`); a row's own captures cannot see that the machine
    moved a group of rows alike in every capture of one side, taken one after the other
    (on a loaded 2-core CPU, the linears and gelus of every MLP block of nanoGPT's GPT ran
    4x slower in three back-to-back captures). A row is tested under both, and its
    p-value is the larger of the two (the intersection-union test, of the same level as
    each of its parts); the change beyond the capture-wide shift is the replicates' one.
    """
    return {key: (max(across_rows[key][0], p), excess) for key, (p, excess) in own.items() if key in across_rows}


def _testable(base: TraceProfile, test: TraceProfile, b: OpStats | None, t: OpStats | None,
              why: tuple[str, ...]) -> bool:
    """Whether a row's changed time can be tested: on both sides, enough steps, not structural."""
    if STRUCTURAL_TAGS.intersection(why) or b is None or t is None:
        return False
    if min(len(b.per_step), len(t.per_step)) < MIN_STEPS:
        return False
    return len(b.per_step) == len(base.step_times) and len(t.per_step) == len(test.step_times)


def _significance(why: tuple[str, ...], change: RowChange | None, tested: tuple[float, float] | None,
                  noise_floor: float, tests: int) -> tuple[str, float | None]:
    """How sure the row's change is: (STRUCTURAL | SIGNIFICANT | NOISE | UNKNOWN, p-value).

    An op that appears, goes or changes its call count is a structural change: no noise
    makes one. A changed time is significant when it is more than rows move between two
    captures of the same program (`_between_captures`), at FAMILY_ALPHA Bonferroni-corrected
    over the rows tested, so that an identical pair shows a significant row with
    probability below FAMILY_ALPHA (0.001: 20 identical pairs all come out clean with
    probability 0.999^20, about 98%; at 0.01 only 82%); and when it matters: the change
    of the row's lower quartile passes the noise floor and RELATIVE_NOISE of the row, in
    the same direction as its change beyond the other rows'. A row that only followed a
    capture-wide shift is noise; so is a row whose time held while the others moved, and a
    row below the noise floor on both sides (left out of the test).
    """
    if STRUCTURAL_TAGS.intersection(why):
        return STRUCTURAL, 0.0
    if change is None:
        return UNKNOWN, None
    if max(change.base, change.test) < noise_floor:
        return NOISE, None
    if tested is None:
        return UNKNOWN, None
    p, excess = tested
    size = abs(change.delta)
    large = size >= noise_floor and size > RELATIVE_NOISE * max(change.base, change.test)
    same_way = change.delta * excess > 0
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


def _replicated(captures: tuple[int, int]) -> bool:
    """Several captures on at least one side: a row's own variance between captures has a degree of freedom."""
    return sum(captures) > 2


def _side(profiles: TraceProfile | Sequence[TraceProfile]) -> list[TraceProfile]:
    return [profiles] if isinstance(profiles, TraceProfile) else list(profiles)


def diff(base: TraceProfile | Sequence[TraceProfile], test: TraceProfile | Sequence[TraceProfile]) -> ProfileDiff:
    """Rows of (module, op) with their delta, why-tags and significance, most telling first.

    Each side is one capture or several captures of the same program (`merge_captures`
    makes their figures one side's). Rows are ranked by the kind of change (`_tier`:
    structural, then significant, then noise), then structural rows by the size of their
    delta and the others by their delta in the direction of the total change, so that a
    new op is never ranked below an existing op whose time only wobbles.
    """
    base_captures, test_captures = _side(base), _side(test)
    used = {p.steps_used for p in (*base_captures, *test_captures)}
    if len(used) > 1:
        raise ValueError(f"both sides must average the same steps ({', '.join(sorted(used))})")
    base, test = merge_captures(base_captures), merge_captures(test_captures)
    total = test.total - base.total
    keys = list(base.rows)
    keys += [k for k in test.rows if k not in base.rows]
    floor = NOISE_SHARE * base.total
    tagged = []
    for key in keys:
        b, t = base.rows.get(key), test.rows.get(key)
        tagged.append((key, b, t, _why(b, t, test.has_device, key, floor)))
    testable = [(key, b, t) for key, b, t, why in tagged if _testable(base, test, b, t, why)]
    captures = (len(base_captures), len(test_captures))
    replicated = _replicated(captures)
    if replicated:
        values = {key: (_capture_values(b, base_captures, floor), _capture_values(t, test_captures, floor))
                  for key, b, t in testable}
        changes = {key: _replicated_change(*sides, floor) for key, sides in values.items()}
    else:
        changes = {key: _row_change(b, t, floor) for key, b, t in testable}
    # A row below the noise floor on both sides can show no change that matters, and its
    # log change (pinned near 0 by the floor) says nothing of how the capture moved.
    judged = [key for key, c in changes.items() if max(c.base, c.test) >= floor]
    tested = _between_captures({key: changes[key] for key in judged})
    if replicated:
        tested = _both(tested, _between_replicates({key: values[key] for key in judged}))
    rows = []
    for key, b, t, why in tagged:
        delta = (t.time if t else 0.0) - (b.time if b else 0.0)
        significance, p_value = _significance(why, changes.get(key), tested.get(key), floor, len(tested))
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
    shift = math.exp(statistics.median(changes[key].log_ratio for key in tested)) if tested else None
    return ProfileDiff(base=base, test=test, rows=rows, shift=shift, captures=captures)


def diff_traces(base: str | Path | Sequence[str | Path], test: str | Path | Sequence[str | Path],
                steps_used: str = FASTER_HALF) -> ProfileDiff:
    """Load two sides, each one trace or several captures of it, and diff them (behind `accelport profile-diff`)."""
    bases = [base] if isinstance(base, str | Path) else list(base)
    tests = [test] if isinstance(test, str | Path) else list(test)
    loaded = profile_traces([*bases, *tests], steps_used)
    return diff(loaded[: len(bases)], loaded[len(bases):])


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


