"""Where did the time go: per-op breakdown of a profiler trace, and the diff of two traces.

This module is the public face of `accelport profile` and `accelport profile-diff`; the
work is done by its neighbours, one concern each:

* `breakdown`: one trace split into rows of (module, op) that add up to the step time;
* `profile_diff`: two breakdowns matched row by row, why-tags, how sure each change is, ranking;
* `profile_render`: the text table, the HTML page and their summary lines;
* `capture`: taking a trace with torch.profiler (and the child process behind `accelport profile`).

`python -m accelport.verify.perf.profile` is that child process.
"""

from __future__ import annotations

from accelport.verify.perf.breakdown import (
    ALL_STEPS,
    BACKWARD_PREFIX,
    COMM_KERNEL_WORDS,
    COMM_PREFIXES,
    COPY_OPS,
    FASTER_HALF,
    IDLE_OP,
    ORPHAN_OP,
    PARALLEL_BYTES,
    STEPS_USED,
    OpStats,
    TraceProfile,
    merge_captures,
    profile_trace,
    profile_traces,
    summarize,
)
from accelport.verify.perf.capture import (
    ModuleScopes,
    _child,
    capture,
    capture_paths,
    choose_activities,
    profiling,
    side_paths,
)
from accelport.verify.perf.profile_diff import (
    FAMILY_ALPHA,
    HOST_BOUND_SHARE,
    MIN_ROWS,
    MIN_STEPS,
    NOISE,
    NOISE_SHARE,
    OTHER_OP,
    RELATIVE_NOISE,
    SIGNIFICANT,
    STRUCTURAL,
    STRUCTURAL_TAGS,
    UNKNOWN,
    DiffRow,
    ProfileDiff,
    diff,
    diff_traces,
    top_rows,
)
from accelport.verify.perf.profile_render import (
    ROW_HEADERS,
    add_diff_to_page,
    as_rows,
    describe_sides,
    format_ms,
    render_html,
    render_single,
    render_text,
    row_cells,
    significance_line,
)

__all__ = [
    "ALL_STEPS",
    "BACKWARD_PREFIX",
    "COMM_KERNEL_WORDS",
    "COMM_PREFIXES",
    "COPY_OPS",
    "FAMILY_ALPHA",
    "FASTER_HALF",
    "HOST_BOUND_SHARE",
    "IDLE_OP",
    "MIN_ROWS",
    "MIN_STEPS",
    "NOISE",
    "NOISE_SHARE",
    "ORPHAN_OP",
    "OTHER_OP",
    "PARALLEL_BYTES",
    "RELATIVE_NOISE",
    "ROW_HEADERS",
    "SIGNIFICANT",
    "STEPS_USED",
    "STRUCTURAL",
    "STRUCTURAL_TAGS",
    "UNKNOWN",
    "DiffRow",
    "ModuleScopes",
    "OpStats",
    "ProfileDiff",
    "TraceProfile",
    "add_diff_to_page",
    "as_rows",
    "capture",
    "capture_paths",
    "choose_activities",
    "describe_sides",
    "diff",
    "diff_traces",
    "format_ms",
    "merge_captures",
    "profile_trace",
    "profile_traces",
    "profiling",
    "render_html",
    "render_single",
    "render_text",
    "row_cells",
    "side_paths",
    "significance_line",
    "summarize",
    "top_rows",
]

if __name__ == "__main__":
    import sys

    sys.exit(_child(sys.argv[1:]))
