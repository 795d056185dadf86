"""The `accelport` command line: a thin skin over the library.

Each command lives in its own module in this package and exposes
`register(subparsers)`; the module's `ORDER` sets its place in `--help`.
Command modules import heavy libraries (torch, triton, libcst) inside their
handlers, so `accelport --help` and `accelport inventory` start fast.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import logging
import os
import pkgutil
import sys
from collections.abc import Sequence

from accelport import __version__
from accelport.errors import InvalidValue, MissingDependency, ParameterHint, UserError
from accelport.textsafe import one_line, terminal

EXIT_OK = 0
EXIT_FAIL = 1  # the command ran and its verdict is "fail" (threshold reached, check failed)
EXIT_USAGE = 2  # bad usage or bad input: one line on stderr names the file and the fix

EXIT_CODES_HELP = """\
exit codes:
  0  done (and, for checks, passed)
  1  done, and the verdict is fail: a --fail-on threshold was reached, a check failed,
     files were skipped, or (for --check) changes would be made
  2  usage or input error: a missing path, a file that cannot be read or parsed,
     an invalid spec, an optional package (torch, triton, ...) not installed;
     one line on stderr says which file and what to do
"""

# Optional packages by top-level module name -> (package to install, accelport extra).
_OPTIONAL = {
    "torch": ("torch", "torch"),
    "numpy": ("numpy", "torch"),
    "msgspec": ("msgspec", "torch"),
    "matplotlib": ("matplotlib", "torch"),
    "triton": ("triton", "kernels"),
    "yaml": ("pyyaml", "pools"),
    "jsonschema": ("jsonschema", "pools"),
    "kubernetes_validate": ("kubernetes-validate", "pools"),
}


def _module_names() -> list[str]:
    return [info.name for info in pkgutil.iter_modules(__path__) if not info.name.startswith("_") and not info.ispkg]


def _command_modules(only: str | None = None) -> list:
    modules = []
    for name in _module_names() if only is None else [only]:
        module = importlib.import_module(f"{__name__}.{name}")
        if hasattr(module, "register"):
            modules.append(module)
    return sorted(modules, key=lambda m: (getattr(m, "ORDER", 100), m.__name__))


def _commands(parser: argparse.ArgumentParser) -> set[str]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return set(action.choices)
    return set()


def _requested_module(argv: Sequence[str]) -> tuple[str, str] | None:
    """The command module named by the first positional argument, if one has that name.

    Importing only that module keeps start-up short (`accelport inventory` need not
    load torch-facing command modules); --help and unknown commands get the full parser.
    """
    args = list(argv)
    while args and args[0].startswith("-"):
        option = args.pop(0)
        if option == "--knowledge" and args:
            args.pop(0)
        elif option in ("-h", "--help", "--version"):
            return None
    if not args:
        return None
    name = args[0].replace("-", "_")
    return (name, args[0]) if name in _module_names() else None


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="accelport",
        description=(
            "Move CUDA-bound PyTorch code to any accelerator PyTorch can drive, and prove the move: "
            "inventory -> route -> rewrite -> operator coverage -> verify -> run both stacks."
        ),
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"accelport {__version__}")
    parser.add_argument(
        "--knowledge",
        action="append",
        default=[],
        metavar="FILE",
        help="site knowledge file (TOML) that adds or overrides vendors, APIs or packages; repeatable",
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="log more (-vv for debug)")
    subparsers = parser.add_subparsers(dest="subcommand", metavar="COMMAND")
    for module in _command_modules(only):
        module.register(subparsers)
    return parser


_quick_exit = False


def main(argv: Sequence[str] | None = None) -> int:
    # Start-up builds many long-lived objects (the parser, knowledge tables, dataclasses)
    # and the cyclic collector kept walking them: a tenth of a short command's run. It is
    # off until the command starts, and stays off for commands that say they build no
    # reference cycles worth collecting and end soon (GC_PAUSED = True in their module).
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _main(argv, collecting)
    finally:
        if collecting:
            gc.enable()


def _main(argv: Sequence[str] | None, collecting: bool) -> int:
    # accelport's CPU-side tools must not fail because a vendor adapter is half-installed
    # (torch imports every backend entry point; a broken one makes `import torch` raise).
    os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
    argv = sys.argv[1:] if argv is None else list(argv)
    requested = _requested_module(argv)
    parser = build_parser(requested[0] if requested else None)
    if requested and requested[1] not in _commands(parser):
        parser = build_parser()  # the module did not register that name (a command living elsewhere)
    args = parser.parse_args(argv)
    _configure_logging(args.verbose)
    if not getattr(args, "handler", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        if args.knowledge:
            from accelport import knowledge

            knowledge.set_user_files(args.knowledge)
        if collecting and not getattr(sys.modules.get(args.handler.__module__), "GC_PAUSED", False):
            gc.enable()
        code = int(args.handler(args) or 0)
        global _quick_exit
        _quick_exit = bool(getattr(sys.modules.get(args.handler.__module__), "QUICK_EXIT", False))
        return code
    except InvalidValue as exc:
        return _error(f"{_flag_of(parser, args, exc.parameter)} {exc.value}: {exc.problem}", exc.exit_code)
    except ParameterHint as exc:
        return _error(f"{exc.message} ({_flag_of(parser, args, exc.parameter)})", exc.exit_code)
    except UserError as exc:
        return _error(str(exc), exc.exit_code)
    except ModuleNotFoundError as exc:
        # An optional package missing deep inside a command (a torch-backed kernel module,
        # say): the same one line as MissingDependency, whichever import hit it.
        root = (exc.name or "").partition(".")[0]
        if root not in _OPTIONAL:
            raise
        package, extra = _OPTIONAL[root]
        return _error(str(MissingDependency(package, extra, f"accelport {args.subcommand}")), EXIT_USAGE)
    except BrokenPipeError:
        # Output piped into `head` and closed early: not an error worth a traceback.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except IsADirectoryError as exc:
        return _error(f"{exc.filename}: is a directory; give a file", EXIT_USAGE)
    except OSError as exc:
        # A file the user named that cannot be read or written (permission, a path through a
        # file, a full disk...): the command's own checks missed it, but it is still the
        # user's input, not accelport's bug.
        if exc.filename is None:
            raise
        return _error(f"{exc.filename}: {exc.strerror or exc}; check the path and its permissions", EXIT_USAGE)
    except KeyboardInterrupt:
        print("accelport: interrupted", file=sys.stderr)
        return 130


class _SafeFormatter(logging.Formatter):
    """Log lines name user files too: they pass the terminal sanitizer like every other output."""

    def format(self, record: logging.LogRecord) -> str:
        return terminal(super().format(record))


def _flag_of(parser: argparse.ArgumentParser, args: argparse.Namespace, parameter: str) -> str:
    """The flag that fed library `parameter` in this command (through its module's DEST_OF), else the parameter."""
    dest = getattr(sys.modules.get(args.handler.__module__), "DEST_OF", {}).get(parameter, parameter)
    return _flag_for(parser, args.handler, dest)


def _parsers_to(parser: argparse.ArgumentParser, handler: object) -> list[argparse.ArgumentParser]:
    """The parsers from the top one down to the (sub)command whose handler is `handler`; [] if none has it.

    Found by handler rather than by the subcommand's name: a nested action (`kernels bench`) is
    one level deeper than ``args.subcommand`` names.
    """
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                chain = [sub] if sub._defaults.get("handler") is handler else _parsers_to(sub, handler)
                if chain:
                    return [parser, *chain]
    return []


def _flag_for(parser: argparse.ArgumentParser, handler: object, parameter: str) -> str:
    """The flag of the command run by `handler` whose value lands in `parameter` (its argparse dest), as typed.

    Library errors name their own parameters; the flag is found here, from the parser that
    read the line, so no table of flag spellings lives outside the CLI. A command module whose
    flag's dest differs from the library parameter says so in ``DEST_OF = {parameter: dest}``.
    A parameter no flag feeds (a value computed from several flags) keeps its library name.
    """
    for level in reversed(_parsers_to(parser, handler) or [parser]):  # the command's own flags first, then global ones
        for action in level._actions:
            if action.dest == parameter and action.option_strings:
                return max(action.option_strings, key=len)
    return parameter


def _error(message: str, code: int) -> int:
    """The one line on stderr for an error a user can fix; names from their files cannot drive the terminal."""
    print(f"accelport: error: {one_line(message)}", file=sys.stderr)
    return code


def _configure_logging(verbose: int) -> None:
    """-v: accelport's progress and decisions (INFO) on stderr; -vv: DEBUG; otherwise warnings only.

    accelport's own logger gets its own handler, so -v works even where the root logger was
    configured by someone else (a test runner, an embedding program); other libraries'
    warnings still reach stderr through the root logger.
    """
    level = [logging.WARNING, logging.INFO, logging.DEBUG][min(verbose, 2)]
    ours = logging.getLogger("accelport")
    for handler in [h for h in ours.handlers if getattr(h, "_accelport_cli", False)]:
        ours.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler._accelport_cli = True  # type: ignore[attr-defined]
    handler.setFormatter(_SafeFormatter("accelport: %(levelname)s: %(message)s"))
    ours.addHandler(handler)
    ours.setLevel(level)
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig(level=logging.WARNING, format="%(name)s: %(levelname)s: %(message)s")
        for root_handler in root.handlers:  # accelport's records are printed by its own handler
            root_handler.addFilter(lambda record: not record.name.startswith("accelport"))


def entry() -> None:
    """The console script: `main`, then a quick exit for commands that ask for one.

    Tearing down the interpreter frees every object one by one; after a scan of a large
    tree that was a tenth of the run. A command that has written and closed all its
    output sets `QUICK_EXIT` on its module, and the process ends at once.
    """
    code = main()
    if _quick_exit:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except (BrokenPipeError, ValueError):
            pass
        logging.shutdown()
        os._exit(code)
    raise SystemExit(code)
