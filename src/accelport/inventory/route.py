"""Route and effort roll-up, per file and per project (SYCLomatic's analysis mode is the precedent)."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence

from accelport import knowledge
from accelport.findings import (
    Category,
    Effort,
    EffortEstimate,
    FileSummary,
    Finding,
    Route,
    RouteDecision,
)

# Kernel definitions (inventory/cxx.py); their `replacement` names a portable operator when one is known.
KERNEL_RULE = "AP5001"
# A CUDA library header include: the library's calls and types are counted where they are used.
LIBRARY_HEADER_RULE = "AP4010"


@knowledge.derived_cache
def _settings() -> dict:
    data = knowledge.read_toml("effort.toml")
    for _path, user in knowledge._user_data():
        for section in ("effort", "route"):
            if section in user:
                data[section] = {**data.get(section, {}), **user[section]}
                if section == "effort" and "hours" in user["effort"]:
                    data["effort"]["hours"] = {**knowledge.read_toml("effort.toml")["effort"]["hours"], **user["effort"]["hours"]}
    return data


def estimate(findings: Iterable[Finding]) -> EffortEstimate:
    hours = _settings()["effort"]["hours"]
    by_level = {e.value: 0 for e in Effort}
    low = high = 0.0
    for finding in findings:
        by_level[finding.effort.value] += 1
        if finding.effort is Effort.NONE:
            continue
        lo, hi = hours["autofix_review"] if finding.autofix else hours[finding.effort.value]
        low += lo
        high += hi
    return EffortEstimate(by_level, low, high)


def roll_up(findings: Iterable[Finding]) -> dict[str, int]:
    """The route-B counts: kernels defined (and how many have a portable operator), library uses, hazards.

    A library header include (AP4010) is not a use: the calls and types it brings in are
    counted where they appear. Hazards count every semantic-hazard finding, route A or B.
    """
    kernels = covered = uses = hazards = 0
    families: set[str] = set()
    for finding in findings:
        if finding.rule_id == KERNEL_RULE:
            kernels += 1
            covered += bool(finding.replacement)
        elif finding.category is Category.LIBRARY_CALL and finding.rule_id != LIBRARY_HEADER_RULE:
            uses += 1
            families.add(finding.family)
        elif finding.category is Category.SEMANTIC_HAZARD:
            hazards += 1
    return {
        "kernels": kernels,
        "kernels_covered": covered,
        "library_uses": uses,
        "library_families": len(families),
        "hazards": hazards,
    }


def decide(findings: Sequence[Finding], effort: EffortEstimate) -> RouteDecision:
    """Route A unless operators must be rewritten (B); C when that route-B work is large."""
    if not findings:
        return RouteDecision(Route.A, ("no CUDA dependency found: nothing to port",))
    # One pass, comparing enum members by identity: this runs once per file with findings,
    # and Counters keyed by enum members hash each one in Python.
    framework = autofix = route_c = 0
    b_findings = []
    for f in findings:
        framework += f.category is Category.FRAMEWORK_API
        autofix += f.autofix
        if f.route is not Route.A:
            b_findings.append(f)
            route_c += f.route is Route.C
    reasons = []
    if framework:
        reasons.append(f"{framework} framework-API finding(s); {autofix} of all findings are fixed by `accelport migrate`")
    counts = roll_up(findings)
    if not b_findings:
        if counts["hazards"]:
            reasons.append(f"{counts['hazards']} semantic hazard(s) to review")
        reasons.append("no kernels, CUDA libraries, extensions or CUDA-only packages: a framework-level port is enough")
        return RouteDecision(Route.A, tuple(reasons))
    b_categories = Counter(f.category for f in b_findings)
    described = ", ".join(f"{n} {c.title}" for c, n in sorted(b_categories.items(), key=lambda kv: kv[0].digit))
    reasons.append(f"operator-level work: {described}")
    if counts["kernels"] or counts["library_uses"] or counts["hazards"]:
        reasons.append(
            f"{counts['kernels']} hand-written CUDA kernel(s), {counts['kernels_covered']} with a portable accelport operator; "
            f"{counts['library_uses']} CUDA library call/type use(s) in {_libraries(counts['library_families'])}; "
            f"{counts['hazards']} semantic hazard(s) to review"
        )
    settings = _settings()["route"]
    b_effort = estimate(b_findings)
    high = b_effort.by_level.get("high", 0)
    if route_c or high >= settings["c_min_high_findings"] or b_effort.hours_high >= settings["c_min_hours"]:
        if route_c:
            reasons.append(f"{route_c} finding(s) need the CUDA stack itself (prebuilt binaries without source)")
        if high >= settings["c_min_high_findings"]:
            reasons.append(f"{high} high-effort findings")
        if b_effort.hours_high >= settings["c_min_hours"]:
            reasons.append(
                f"route-B work estimated at {b_effort.hours_low:.0f}-{b_effort.hours_high:.0f} h: "
                "keep a CUDA pool running while it proceeds"
            )
        return RouteDecision(Route.C, tuple(reasons))
    return RouteDecision(Route.B, tuple(reasons))


def summarise(findings: Sequence[Finding]) -> tuple[RouteDecision, EffortEstimate, list[FileSummary]]:
    """Project route and effort, plus one summary per file with findings."""
    per_file: dict[str, list[Finding]] = defaultdict(list)
    for finding in findings:
        per_file[finding.location.path].append(finding)
    files = []
    for path, items in per_file.items():
        effort = estimate(items)
        files.append(FileSummary(path, len(items), decide(items, effort), effort))
    effort = estimate(findings)
    return decide(findings, effort), effort, files


def _libraries(count: int) -> str:
    return f"{count} library" if count == 1 else f"{count} libraries"
