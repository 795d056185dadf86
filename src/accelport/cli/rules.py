"""`accelport rules [ID]`: every rule behind a finding, with why it matters off CUDA, before/after, effort and fix."""

from __future__ import annotations

import argparse
import json

from accelport import knowledge
from accelport.cli._output import emit
from accelport.errors import UserError
from accelport.findings import Category
from accelport.report.table import text_table

ORDER = 70


def describe(rule) -> str:
    lines = [
        f"{rule.id} {rule.name}",
        f"  {rule.summary}",
        "",
        f"  category  {rule.category.title}    family  {rule.family}    effort  {rule.effort.value}"
        f"    route  {rule.route.value}    fixed by migrate  {'yes' if rule.autofix else 'no'}",
        "",
        "  Why it matters off CUDA:",
        f"    {rule.why}",
        "",
        "  Before:",
        *(f"    {line}" for line in rule.before.splitlines()),
        "  After:",
        *(f"    {line}" for line in rule.after.splitlines()),
    ]
    if rule.fix:
        lines += ["", f"  Fix: {rule.fix}"]
    if rule.sources:
        lines += ["", f"  Sources: {', '.join(rule.sources)}"]
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    if args.rule:
        rule = knowledge.rule(args.rule)
        emit(json.dumps(rule.to_dict(), indent=2) + "\n" if args.format == "json" else describe(rule), args.output)
        return 0
    rules = list(knowledge.rules().values())
    if args.category:
        known = [c.value for c in Category]
        if args.category not in known:
            raise UserError(f"--category {args.category}: no such category; known: {', '.join(known)}")
        rules = [r for r in rules if r.category.value == args.category]
    if args.format == "json":
        emit(json.dumps([r.to_dict() for r in rules], indent=2) + "\n", args.output)
        return 0
    rows = [(r.id, r.category.value, r.effort.value, "yes" if r.autofix else "no", r.summary) for r in rules]
    emit(text_table(["id", "category", "effort", "auto", "summary"], rows, max_width=90), args.output)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("rules", help="list the rules behind findings, or explain one", description=__doc__)
    parser.add_argument("rule", nargs="?", metavar="ID", help="a rule ID such as AP1203")
    parser.add_argument("--category", help="only rules of this category (framework-api, kernel, ...)")
    parser.add_argument("--format", choices=("table", "json"), default="table")
    parser.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    parser.set_defaults(handler=run)
