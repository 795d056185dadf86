"""`accelport demo`: the whole workflow on examples/legacy_cuda_app, one step after another.

Each step is a module in `accelport.cli.demo_steps` named `stepNN_<what>.py` with
`TITLE` and `run(ctx)`; steps run in name order and share a `DemoContext`.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accelport.cli._conventions import add_output_dir
from accelport.cli._output import Style, use_color
from accelport.errors import UserError

ORDER = 900


@dataclass
class DemoContext:
    """What the demo steps share: where the example is, a scratch folder, results so far."""

    examples: Path
    workdir: Path
    style: Style
    results: dict[str, Any] = field(default_factory=dict)

    @property
    def app(self) -> Path:
        return self.examples / "legacy_cuda_app"

    def say(self, text: str = "") -> None:
        print(text, flush=True)


def find_examples(explicit: str | None) -> Path:
    if explicit:
        path = Path(explicit)
        if not (path / "legacy_cuda_app").is_dir():
            raise UserError(f"{path}: has no legacy_cuda_app/; pass the repository's examples/ folder")
        return path
    here = Path(__file__).resolve()
    # Installed wheel: the example ships as package data (accelport/_examples);
    # source checkout (editable install): src/accelport/cli/demo.py -> repo/examples.
    for candidate in (here.parents[1] / "_examples", here.parents[3] / "examples", Path.cwd() / "examples"):
        if (candidate / "legacy_cuda_app").is_dir():
            return candidate
    raise UserError("cannot find examples/legacy_cuda_app; run from the repository root or pass --examples DIR")


def steps() -> list:
    from accelport.cli import demo_steps

    names = sorted(info.name for info in pkgutil.iter_modules(demo_steps.__path__) if info.name.startswith("step"))
    return [importlib.import_module(f"{demo_steps.__name__}.{name}") for name in names]


def run(args: argparse.Namespace) -> int:
    examples = find_examples(args.examples)
    workdir = Path(args.output_dir).resolve()
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    style = Style(use_color())
    ctx = DemoContext(examples=examples, workdir=workdir, style=style)
    selected = steps()
    if args.only:
        selected = [s for s in selected if any(word in s.__name__ for word in args.only)]
    failures = 0
    for number, step in enumerate(selected, 1):
        ctx.say(style.bold(f"\n== {number}/{len(selected)} {step.TITLE} =="))
        started = time.monotonic()
        ok = step.run(ctx)
        elapsed = time.monotonic() - started
        if ok is False:
            failures += 1
            ctx.say(style.red(f"-- step failed ({elapsed:.1f} s)"))
        else:
            ctx.say(style.dim(f"-- done in {elapsed:.1f} s"))
    ctx.say(style.bold(f"\ndemo finished: {len(selected) - failures}/{len(selected)} steps passed; files in {workdir}"))
    sys.stdout.flush()
    return 1 if failures else 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="run the whole workflow on the bundled legacy CUDA example",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--examples", metavar="DIR", help="the examples/ folder (default: found from the checkout)")
    add_output_dir(parser, "demo", "scratch folder, recreated", default="accelport-demo", old=("--workdir",))
    parser.add_argument("--only", nargs="*", metavar="WORD", help="run only the steps whose module name contains WORD")
    parser.set_defaults(handler=run)
