"""Demo step 50: route B, the example's hand-written CUDA kernel mapped to its portable operator, validated on CPU."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from typing import Any

TITLE = "Kernels: map the example's CUDA kernel to a portable Triton operator and validate it on CPU"
FALLBACK_OP = "rms_norm"


def kernel_findings(ctx: Any) -> tuple[list[Any], str]:
    """The inventory's kernel findings, and where they came from (an earlier step, or a fresh scan)."""
    report = ctx.results.get("inventory")
    origin = "the inventory step"
    if report is None:
        try:
            from accelport.inventory import scan
        except ImportError:
            return [], "no inventory (accelport.inventory.scan is not available)"
        report = scan([str(ctx.app)])
        origin = "a fresh inventory scan"
    return [f for f in report.findings if getattr(f.category, "value", f.category) == "kernel"], origin


def operator_named(replacement: str | None) -> str | None:
    """The accelport operator a finding's replacement names ('accelport.kernels rms_norm' -> 'rms_norm')."""
    from accelport.kernels import OPERATOR_NAMES

    words = set(re.findall(r"[a-z_]+", replacement or ""))
    return next((name for name in OPERATOR_NAMES if name in words), None)


def _validate(op_name: str) -> list[dict[str, Any]]:
    """Validate every implementation of one operator on CPU under the Triton interpreter."""
    import importlib.util

    from accelport.errors import MissingDependency

    if importlib.util.find_spec("triton") is None:
        # One line naming the extra, not a traceback from the validating child (seen from a wheel
        # installed without [kernels]).
        raise MissingDependency("triton", "kernels", "the demo's kernel step (accelport demo)")
    from accelport.kernels import KernelError, get, registry, validate

    try:
        registry.use_interpreter()
        return [r.to_dict() for r in validate.validate(get(op_name), device="cpu")]
    except KernelError:
        # Triton was imported in GPU mode earlier in this process: validate in a fresh one.
        proc = subprocess.run(
            [sys.executable, "-m", "accelport", "kernels", "test", op_name, "--device", "cpu", "--no-lint", "--format", "json"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if not proc.stdout.strip():
            raise RuntimeError(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "validation produced nothing") from None
        return json.loads(proc.stdout)["results"]


def run(ctx: Any) -> bool:
    findings, origin = kernel_findings(ctx)
    mapped: dict[str, list[Any]] = {}
    for finding in findings:
        op = operator_named(finding.replacement)
        if op is not None:
            mapped.setdefault(op, []).append(finding)
    if mapped:
        ctx.say(f"kernel findings from {origin} that name an accelport operator:")
        for op, op_findings in mapped.items():
            for f in op_findings:
                ctx.say(f"  {f.location}  {f.symbol}  [{f.rule_id}]  ->  {ctx.style.bold(op)}  ({f.replacement})")
        ops = list(mapped)
    else:
        if findings:
            ctx.say(f"{len(findings)} kernel finding(s) from {origin}, but none names an accelport operator as its replacement.")
        else:
            ctx.say(f"no kernel finding was available ({origin} reported none).")
        ctx.say(f"No mapping was made; validating {FALLBACK_OP} on its own.")
        ops = [FALLBACK_OP]
    ok = True
    for op in ops:
        results = _validate(op)
        for impl in sorted({r["implementation"] for r in results}):
            mine = [r for r in results if r["implementation"] == impl]
            passed = sum(r["passed"] for r in mine)
            worst = max(r["worst_ratio"] for r in mine)
            verdict = ctx.style.green("pass") if passed == len(mine) else ctx.style.red("FAIL")
            dtypes = ", ".join(sorted({r["dtype"] for r in mine}))
            ctx.say(
                f"  {op} [{impl}] vs PyTorch reference, Triton interpreter on CPU: {passed}/{len(mine)} checks {verdict} "
                f"({dtypes}; worst error {worst:.2f} of tolerance)"
            )
            ok = ok and passed == len(mine)
    ctx.results["kernels"] = {"operators": ops, "mapped": bool(mapped), "passed": ok}
    return ok
