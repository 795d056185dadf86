"""`accelport bench`: median step time with a bootstrap CI, throughput and peak memory; compare with a baseline.

Run a script whose loop calls `accelport.verify.perf.bench.step()` once per step:

    accelport bench --samples-per-step 32 --save cpu.json -- python train.py --steps 200
    accelport bench --result cpu.json --baseline cuda.json --floor 0.6

A script without step markers is timed as a whole, one run per sample.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from accelport.cli._output import check_range, check_save_path, emit, save_text

ORDER = 60


def _render(result: dict, comparison: dict | None) -> str:
    lines = [
        f"scenario      {result['scenario']}  ({result['steps']} {result['unit']}s measured after {result['warmup']} warm-up; stop: {result['stop_reason']})",
        f"median        {result['median_s'] * 1000:.3f} ms per {result['unit']}  "
        f"(95% CI {result['ci_low_s'] * 1000:.3f} .. {result['ci_high_s'] * 1000:.3f} ms, width {result['ci_rel_width'] * 100:.1f}%)",
        f"variability   cv {result['cv'] * 100:.1f}%  min {result['min_s'] * 1000:.3f} ms  max {result['max_s'] * 1000:.3f} ms  "
        f"outliers {result['outliers']}{'  NOISY HOST' if result['noisy'] else ''}",
    ]
    for key, label in (("samples_per_s", "samples/s"), ("tokens_per_s", "tokens/s")):
        if result.get(key):
            t = result[key]
            lines.append(f"throughput    {t['median']:.4g} {label}  (CI {t['ci_low']:.4g} .. {t['ci_high']:.4g})")
    if result.get("peak_device_memory_bytes"):
        lines.append(f"peak device   {result['peak_device_memory_bytes'] / 2**20:.1f} MiB")
    if result.get("peak_host_rss_bytes"):
        lines.append(f"peak host RSS {result['peak_host_rss_bytes'] / 2**20:.1f} MiB")
    if not result["converged"]:
        lines.append("note          the CI did not reach the target width; more steps or a quieter host would tighten it")
    if comparison:
        c = comparison
        lines.append(
            f"vs baseline   {c['ratio']:.3f}x of baseline {c['basis']} (CI {c['ci_low']:.3f} .. {c['ci_high']:.3f}), "
            f"floor {c['floor']:.2f}: {c['verdict'].upper()}"
            + (f"  (the floor lies inside the CI; {_decide(c)})" if c["verdict"] == "inconclusive" else "")
        )
        if c.get("mismatch"):
            lines.append(f"mismatch      compared anyway: {'; '.join(c['mismatch'])}")
    return "\n".join(lines) + "\n"


def _decide(comparison: dict) -> str:
    more = comparison.get("steps_to_decide")
    if more:
        return f"about {more} more steps per side would decide, if the ratio holds"
    return "the ratio sits on the floor: no number of steps decides"


def _params(values: list[str]) -> dict[str, str]:
    from accelport.errors import UserError

    out = {}
    for value in values:
        key, sep, text = value.partition("=")
        if not sep or not key.strip():
            raise UserError(f"--param {value}: write KEY=VALUE, e.g. --param model=tinylm --param batch=32")
        out[key.strip()] = text.strip()
    return out


def run(args: argparse.Namespace) -> int:
    from accelport.errors import UserError
    from accelport.verify.perf import bench

    command = list(args.command or [])
    if command and command[0] == "--":
        command = command[1:]
    check_range("--warmup", args.warmup, low=0)
    check_range("--min-steps", args.min_steps, low=1)
    check_range("--max-steps", args.max_steps, low=1)
    check_range("--budget", args.budget, low=0, low_open=True)
    check_range("--ci", args.ci, low=0, high=1, low_open=True, high_open=True)
    check_range("--samples-per-step", args.samples_per_step, low=0, low_open=True)
    check_range("--tokens-per-step", args.tokens_per_step, low=0, low_open=True)
    check_range("--floor", args.floor, low=0, low_open=True)
    save = check_save_path("--save", args.save)
    params = _params(args.param or [])
    if args.result:
        if command:
            raise UserError("give either --result FILE or a command after --, not both")
        result = bench.load_result(args.result)
        if params:
            raise UserError("--param describes a run to benchmark; a saved --result keeps the params it was saved with")
    elif command:
        rule = bench.StopRule(warmup=args.warmup, min_steps=args.min_steps, max_steps=args.max_steps,
                              budget_s=args.budget, target_ci=args.ci)
        with tempfile.TemporaryDirectory(prefix="accelport-bench-") as scratch:
            result = bench.run_command(command, Path(scratch), scenario=args.scenario, rule=rule,
                                       samples_per_step=args.samples_per_step, tokens_per_step=args.tokens_per_step,
                                       params=params)
    else:
        raise UserError("nothing to benchmark: put the command after --, e.g. `accelport bench -- python train.py`, or pass --result FILE")
    data = result.to_dict()
    comparison = None
    if args.baseline:
        comparison = bench.compare(result, bench.load_result(args.baseline), floor=args.floor,
                                   allow_mismatch=args.allow_mismatch).to_dict()
        data["comparison"] = comparison
    save_text("--save", save, json.dumps(result.to_dict(), indent=2) + "\n")
    emit(json.dumps(data, indent=2) + "\n" if args.format == "json" else _render(data, comparison), args.output)
    return 1 if comparison and not comparison["passed"] else 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("bench", help="step time with a confidence interval; compare with a baseline",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", default="default", help="name of what is measured (default: %(default)s)")
    parser.add_argument("--param", action="append", metavar="KEY=VALUE",
                        help="what else defines the scenario (model=..., shape=..., batch=...); repeatable. "
                             "--baseline refuses a result whose scenario, params or samples per step differ")
    parser.add_argument("--allow-mismatch", action="store_true",
                        help="compare with a baseline of a different scenario anyway (the report lists the differences)")
    parser.add_argument("--warmup", type=int, default=3, help="steps (or runs) not measured (default: %(default)s)")
    parser.add_argument("--min-steps", type=int, default=10, help="measured steps before the CI may stop the run (default: %(default)s)")
    parser.add_argument("--max-steps", type=int, default=1000, help="stop after this many measured steps (default: %(default)s)")
    parser.add_argument("--budget", type=float, default=120.0, metavar="SECONDS", help="stop after this long (default: %(default)s)")
    parser.add_argument("--ci", type=float, default=0.05, metavar="REL", help="stop when the 95%% CI of the median is this narrow, relative (default: %(default)s)")
    parser.add_argument("--samples-per-step", type=float, help="samples per step, for samples/s (or pass samples= to step())")
    parser.add_argument("--tokens-per-step", type=float, help="tokens per step, for tokens/s")
    parser.add_argument("--result", metavar="FILE", help="use a saved result instead of running a command")
    parser.add_argument("--baseline", metavar="FILE", help="bench result from the reference machine to compare with")
    parser.add_argument("--floor", type=float, default=0.6, help="pass when throughput >= FLOOR x baseline (default: %(default)s)")
    parser.add_argument("--save", metavar="FILE", help="save the result as JSON (input for --baseline and accept)")
    parser.add_argument("--format", choices=("table", "json"), default="table")
    parser.add_argument("-o", "--output", metavar="FILE", help="write the report to FILE instead of stdout")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- the command to benchmark")
    parser.set_defaults(handler=run)
