"""`accelport accept SPEC.toml`: one spec of thresholds -> one report (HTML with plots, JUnit XML, JSON).

    accelport accept acceptance.toml --output-dir report/

The spec lists correctness (dump directories), precision (loss curves),
performance (bench results, ratio floor, optional traces), stability (soak
results) and collectives (comm results). Exit 1 when any check fails or
cannot run; exit 2 for an invalid spec or an input that does not load.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from accelport.cli._conventions import add_output_dir
from accelport.cli._output import emit

ORDER = 70


def run(args: argparse.Namespace) -> int:
    from accelport.verify import accept

    spec = accept.load_spec(args.spec)
    report = accept.evaluate(spec)
    paths = accept.write_reports(report, Path(args.output_dir))
    if args.format == "json":
        emit(json.dumps({**report.to_dict(), "files": {k: str(v) for k, v in paths.items()}}, indent=2, default=str) + "\n", args.output)
    else:
        emit(accept.render_text(report) + "\n" + "\n".join(f"{k:5} {v}" for k, v in paths.items()) + "\n", args.output)
    return 0 if report.passed else 1


def register(subparsers: argparse._SubParsersAction) -> None:
    from accelport.verify.accept import __doc__ as spec_doc

    parser = subparsers.add_parser("accept", help="judge a migration against a spec; HTML, JUnit and JSON report",
                                   description=(__doc__ or "") + "\nspec format:\n" + (spec_doc or ""),
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("spec", help="acceptance spec (TOML)")
    add_output_dir(parser, "accept", "where report.html/.junit.xml/.json go", default="accelport-accept", old=("--out-dir",))
    parser.add_argument("--format", choices=("table", "json"), default="table")
    parser.add_argument("-o", "--output", metavar="FILE", help="write the summary to FILE instead of stdout")
    parser.set_defaults(handler=run)
