"""`accelport pools render|validate|route|submit`: one job, rendered for Slurm and Kubernetes pools per vendor, and routed."""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from accelport.cli._conventions import add_deprecated, add_format
from accelport.cli._output import emit
from accelport.errors import UserError
from accelport.fileio import read_input_text
from accelport.textsafe import one_line

ORDER = 70


def _load(args: argparse.Namespace):
    from accelport.pools.model import job_from_toml, load_pools

    job = job_from_toml(args.job)
    if getattr(args, "job_id", None):
        job = job.with_id(args.job_id)
    return job, load_pools(args.pools)


def _selected(pools, args: argparse.Namespace):
    from accelport.pools.model import find_pool

    repeated = sorted({name for name in args.pool if args.pool.count(name) > 1})
    if repeated:
        raise UserError(f"--pool {', '.join(repeated)} given more than once; name each pool once")
    chosen = [find_pool(pools, name) for name in args.pool] if args.pool else list(pools)
    if args.engine:
        chosen = [p.on(args.engine) for p in chosen]
    return chosen


def _render_all(args: argparse.Namespace):
    from accelport.pools.render import render_admin, render_for_pool

    job, pools = _load(args)
    chosen = _selected(pools, args)
    artefacts = []
    for pool in chosen:
        artefacts.append(render_for_pool(job, pool))
    if args.admin:
        artefacts += render_admin(chosen, job)
    return job, artefacts


def _write_or_print(artefacts, args: argparse.Namespace) -> None:
    if args.output_dir:
        from accelport.fileio import atomic_write_text

        out = Path(args.output_dir)
        if out.exists() and not out.is_dir():
            raise UserError(f"{out}: is not a directory; give a folder for --output-dir")
        for artefact in artefacts:
            try:
                atomic_write_text(out / artefact.filename, artefact.text)
            except OSError as exc:
                raise UserError(f"{out}: cannot write {artefact.filename} there ({exc.strerror or exc}); choose another --output-dir") from None
        listing = "\n".join(str(out / a.filename) for a in artefacts)
        emit(listing + "\n", None)
        return
    if args.format == "json":
        payload = [
            {"file": a.filename, "kind": a.kind, "pool": a.pool, "engine": a.engine, "text": a.text, "objects": list(a.objects)}
            for a in artefacts
        ]
        emit(json.dumps(payload, indent=2) + "\n", args.output)
        return
    if len(artefacts) == 1:  # the file itself: a batch script's #! must stay its first line
        emit(artefacts[0].text, args.output)
        return
    chunks = [f"# ---- {a.filename} ----\n{a.text}" for a in artefacts]
    emit("\n".join(chunks), args.output)


def run_render(args: argparse.Namespace) -> int:
    _, artefacts = _render_all(args)
    _write_or_print(artefacts, args)
    return 0


def _validate_artefacts(artefacts, args: argparse.Namespace):
    from accelport.pools.validate import checks_for, sbatch_problems, validate_object

    rows = []
    for artefact in artefacts:
        if artefact.kind == "sbatch":
            problems = sbatch_problems(artefact.text, artefact.filename, test_only=args.sbatch_test)
            checks = ["bash -n", "#SBATCH lines"] + (["sbatch --test-only"] if args.sbatch_test else [])
            rows.append((artefact.filename, checks, problems))
        elif artefact.kind == "manifest":
            for obj in artefact.objects:
                problems = validate_object(obj, args.k8s_version)
                subject = f"{artefact.filename}: {obj.get('kind')}/{obj.get('metadata', {}).get('name')}"
                rows.append((subject, list(checks_for(obj)), problems))
        else:
            rows.append((artefact.filename, ["not validated (configuration snippet)"], []))
    return rows


def _artefacts_from_files(paths: list[str]):
    from accelport.pools.render import Artefact

    artefacts = []
    for name in paths:
        path = Path(name)
        text = read_input_text(path, "rendered file")
        if path.suffix in (".yaml", ".yml", ".json", ".sbatch", ".sh") and not text.strip():
            raise UserError(f"{path}: is empty; give a rendered manifest or batch script (accelport pools render --output-dir DIR)")
        if path.suffix in (".yaml", ".yml", ".json"):
            import yaml

            try:
                documents = list(yaml.safe_load_all(text))
            except yaml.YAMLError as exc:
                raise UserError(f"{path}: not valid YAML ({str(exc).splitlines()[0]}); fix the file") from None
            objects = [o for o in documents if o is not None]
            if not objects:
                raise UserError(f"{path}: holds no Kubernetes objects, only empty YAML documents")
            for number, doc in enumerate(documents, 1):
                if doc is not None and not isinstance(doc, dict):
                    raise UserError(
                        f"{path}: YAML document {number} is a {type(doc).__name__}, not a mapping; "
                        "each document must be one Kubernetes object (apiVersion, kind, metadata, ...)"
                    )
            artefacts.append(Artefact(path.name, "manifest", text, objects=tuple(objects)))
        elif path.suffix in (".sbatch", ".sh"):
            artefacts.append(Artefact(path.name, "sbatch", text))
        else:
            raise UserError(f"{path}: unknown file type; validate takes .yaml/.yml/.json manifests or .sbatch/.sh scripts")
    return artefacts


def run_validate(args: argparse.Namespace) -> int:
    from accelport.pools.validate import check_k8s_version

    if args.k8s_version:
        check_k8s_version(args.k8s_version)
    if args.files:
        artefacts = _artefacts_from_files(args.files)
    else:
        if not args.job or not args.pools:
            raise UserError("give a job and --pools to render and validate, or --files FILE... to validate rendered files")
        _, artefacts = _render_all(args)
    rows = _validate_artefacts(artefacts, args)
    failed = sum(1 for _, _, problems in rows if problems)
    if args.format == "json":
        payload = {
            "passed": failed == 0,
            "results": [{"subject": s, "checks": c, "problems": [p.to_dict() for p in ps]} for s, c, ps in rows],
        }
        emit(json.dumps(payload, indent=2) + "\n", args.output)
    else:
        lines = []
        for subject, checks, problems in rows:
            lines.append(one_line(f"{'FAIL' if problems else 'ok  '} {subject}  ({', '.join(checks)})"))
            lines += [one_line(f"     - {p.path + ': ' if p.path else ''}{p.message} [{p.check}]") for p in problems]
        lines.append(f"{len(rows) - failed} passed, {failed} failed")
        emit("\n".join(lines) + "\n", args.output)
    return 1 if failed else 0


def _signals(args: argparse.Namespace, pools):
    from accelport.pools.probes import loads_from_json, probe_pools

    notes: list[str] = []
    signals = {}
    if args.signals:
        path = Path(args.signals)
        text = read_input_text(path, "signals file", hint="check --signals")
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UserError(f"{path}: not valid JSON ({exc}); fix the file") from None
        signals.update(loads_from_json(data, str(path)))
    commands = []
    if args.probe:
        report = probe_pools(pools, dry_run=args.dry_run)
        signals.update(report.loads)
        commands = [{"pool": c.pool, "argv": list(c.argv)} for c in report.commands]
        notes += [f"probe for {name} failed, routed without its load: {why}" for name, why in report.failures.items()]
        if args.dry_run:
            notes.append("dry run: probe commands listed, not run; routed without load signals")
    return signals, commands, notes


def _check_pin(args: argparse.Namespace, pools) -> None:
    """An unknown --pin is a typo, not a routing outcome: bad input, exit 2."""
    if args.pin:
        from accelport.pools.model import find_pool

        try:
            find_pool(pools, args.pin)
        except UserError as exc:
            raise UserError(f"--pin: {exc}") from None


def run_route(args: argparse.Namespace) -> int:
    from accelport.pools.router import decide, ramp_shares

    if args.simulate is not None and args.simulate < 1:
        raise UserError(f"--simulate {args.simulate}: give a number of job ids, 1 or more")
    job, pools = _load(args)
    _check_pin(args, pools)
    signals, commands, notes = _signals(args, pools)
    if args.simulate:
        decisions = [decide(job.with_id(f"{job.id}-{i}"), pools, signals, policy=args.policy) for i in range(args.simulate)]
        shares = ramp_shares(decisions)
        if args.format == "json":
            emit(json.dumps({"jobs": args.simulate, "shares": shares, "probe_commands": commands, "notes": notes}, indent=2) + "\n", args.output)
        else:
            lines = [f"{args.simulate} simulated job ids ({job.id}-0 ... {job.id}-{args.simulate - 1}):"]
            lines += [f"  {pool:20} {share:7.2%}" for pool, share in shares.items()]
            emit("\n".join(lines + notes) + "\n", args.output)
        return 0
    decision = decide(job, pools, signals, policy=args.policy, pin=args.pin)
    if args.format == "json":
        payload = decision.to_dict() | {"probe_commands": commands, "notes": list(decision.notes) + notes}
        emit(json.dumps(payload, indent=2) + "\n", args.output)
    else:
        from accelport.report.table import text_table

        rows = [
            (
                ("-> " if c.pool == decision.pool else "   ") + c.pool,
                c.vendor,
                c.engine,
                c.state,
                str(c.weight),
                f"{c.share:.0%}",
                c.why_not or "eligible",
                "-" if c.load is None else f"{c.load.free if c.load.free is not None else '?'} free / {c.load.pending_jobs} waiting",
            )
            for c in decision.candidates
        ]
        head = f"job {decision.job_id} -> {decision.pool or 'NO POOL'}: {decision.reason}\n"
        text = head + text_table(["pool", "vendor", "engine", "state", "weight", "share", "eligibility", "load"], rows)
        for command in commands:
            text += f"probe ({command['pool']}): {' '.join(command['argv'])}\n"
        text += "".join(f"note: {n}\n" for n in notes)
        emit(text, args.output)
    return 0 if decision.pool else 1


def run_submit(args: argparse.Namespace) -> int:
    from accelport.pools.model import find_pool
    from accelport.pools.render import render_for_pool
    from accelport.pools.router import decide
    from accelport.pools.submit import submit

    job, pools = _load(args)
    _check_pin(args, pools)
    signals, _, notes = _signals(args, pools)
    decision = decide(job, pools, signals, policy=args.policy, pin=args.pin)
    if decision.pool is None:
        raise UserError(f"{args.job}: {decision.reason}")
    pool = find_pool(pools, decision.pool)
    artefact = render_for_pool(job, pool)
    workdir = args.output_dir or tempfile.mkdtemp(prefix="accelport-submit-")
    try:
        result = submit(artefact, workdir, dry_run=args.dry_run)
    except OSError as exc:
        raise UserError(f"{workdir}: cannot write {artefact.filename} there ({exc.strerror or exc}); choose another --output-dir") from None
    if args.format == "json":
        emit(json.dumps({"decision": decision.to_dict(), "submission": result.to_dict(), "notes": notes}, indent=2) + "\n", args.output)
    else:
        lines = [f"job {job.id} -> pool {pool.name} ({pool.vendor.name}, {pool.engine}): {decision.reason}"]
        if result.dry_run:
            lines.append(f"would run: {' '.join(result.argv)}")
        else:
            lines.append(f"ran: {' '.join(result.argv)} (exit {result.returncode})")
            if result.output:
                lines.append(result.output)
        emit("\n".join(lines + notes) + "\n", args.output)
    return 0 if result.dry_run or result.returncode == 0 else 1


def _common(parser: argparse.ArgumentParser, *, job_required: bool = True) -> None:
    if job_required:
        parser.add_argument("job", help="job file (TOML with a [job] table)")
    parser.add_argument("--pools", action="append", default=[], metavar="FILE", help="pool file (TOML with [[pool]] tables); repeatable")
    add_format(parser, ("table", "json"))
    parser.add_argument("-o", "--output", metavar="FILE", help="write the report to FILE instead of stdout")


def _render_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pool", action="append", default=[], metavar="NAME", help="only this pool; repeatable (default: every pool)")
    parser.add_argument("--engine", choices=("slurm", "kubernetes"), help="render for this engine instead of each pool's own")
    parser.add_argument("--admin", action="store_true", help="also render Kueue/Volcano queues, gres.conf/slurm.conf, and the HTTPRoute of a service")


def _route_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--job-id", help="the id the router hashes (default: the job file's id, else its name)")
    parser.add_argument("--policy", choices=("weighted", "least-loaded"), default="weighted")
    parser.add_argument("--pin", metavar="POOL", help="send the job to this pool (refused if it is drained, down or too small)")
    parser.add_argument("--signals", metavar="FILE", help='load signals as JSON: {"pool": {"total": 64, "used": 60, "pending_jobs": 2}}')
    parser.add_argument("--probe", action="store_true", help="measure load with squeue/sinfo or kubectl (Kueue/Volcano queue status)")
    parser.add_argument("--dry-run", action="store_true", help="print the commands instead of running them")


# Library parameters whose flag has another dest (errors.InvalidValue names the parameter; the CLI words the flag).
DEST_OF = {"paths": "pools", "version": "k8s_version"}


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("pools", help="render, validate, route and submit one job across Slurm/Kubernetes pools per vendor", description=__doc__)
    sub = parser.add_subparsers(dest="pools_command", metavar="ACTION", required=True)

    render = sub.add_parser("render", help="render the job for each pool: sbatch script or Kubernetes manifest")
    _common(render)
    _render_options(render)
    render.add_argument("--output-dir", metavar="DIR", help="write one file per pool into DIR instead of printing")
    render.set_defaults(handler=run_render)

    validate = sub.add_parser("validate", help="render and check: Kubernetes schemas (strict), CRD schemas, device counts, sbatch")
    _common(validate, job_required=False)
    validate.add_argument("job", nargs="?", help="job file to render and validate")
    _render_options(validate)
    validate.add_argument("--files", nargs="+", metavar="FILE", help="validate rendered files (.yaml manifests, .sbatch scripts) instead")
    validate.add_argument("--sbatch-test", action="store_true", help="also run `sbatch --test-only` on each script (needs a Slurm cluster)")
    validate.add_argument("--k8s-version", help="Kubernetes version whose schemas to use (default from knowledge/schedulers.toml)")
    validate.add_argument("--output-dir", help=argparse.SUPPRESS)
    validate.set_defaults(handler=run_validate, output_dir=None)

    route = sub.add_parser("route", help="pick the pool for a job: pinned, weighted ramp, load-aware, failover")
    _common(route)
    _route_options(route)
    route.add_argument("--simulate", type=int, metavar="N", help="route N job ids derived from the job's id and print each pool's share")
    route.set_defaults(handler=run_route)

    submit = sub.add_parser("submit", help="route, render and submit with sbatch or kubectl (--dry-run prints the command)")
    _common(submit)
    _route_options(submit)
    submit.add_argument("--output-dir", metavar="DIR", help="where the rendered file is written (default: a new temporary folder)")
    add_deprecated(submit, "pools submit", "--workdir", "--output-dir", "output_dir", "DIR")
    submit.set_defaults(handler=run_submit)
