"""One CLI dialect: every subcommand's parser follows the conventions of accelport.cli._conventions."""

from __future__ import annotations

import argparse

import pytest

from accelport.cli import _conventions, build_parser

# Commands whose output is a list of findings: they take --select, --ignore and --fail-on.
FINDINGS_COMMANDS = {"inventory", "migrate"}


def _subcommands(parser: argparse.ArgumentParser, prefix: str = ""):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                path = f"{prefix} {name}".strip()
                nested = [a for a in sub._actions if isinstance(a, argparse._SubParsersAction)]
                if nested:
                    yield from _subcommands(sub, path)
                else:
                    yield path, sub


COMMANDS = dict(_subcommands(build_parser()))


def _visible(sub: argparse.ArgumentParser):
    return [a for a in sub._actions if a.option_strings and a.help is not argparse.SUPPRESS]


def _deprecated(command: str, option: str) -> bool:
    return (command, option) in _conventions.DEPRECATED


def test_every_command_is_checked():
    assert {"inventory", "migrate", "dump", "profile", "profile-diff", "accept", "comm", "demo", "pools submit",
            "kernels list"} <= set(COMMANDS)


def _subparser_dests(parser: argparse.ArgumentParser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield action.dest
            for sub in action.choices.values():
                yield from _subparser_dests(sub)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_no_argument_overwrites_the_name_of_the_command(command):
    """The CLI words a library error with the flag of the command that ran (args.<subparsers dest>): an
    argument of the same dest (bench's `-- command`, say) would overwrite that name."""
    taken = set(_subparser_dests(build_parser()))
    assert not {a.dest for a in COMMANDS[command]._actions} & taken


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_o_and_output_always_name_a_file(command):
    for action in COMMANDS[command]._actions:
        names = set(action.option_strings)
        if names & {"-o", "--output"} and not isinstance(action, _conventions._Deprecated):
            assert names == {"-o", "--output"}, (command, names)
            assert action.dest == "output" and action.metavar == "FILE", (command, action.metavar)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_folders_are_output_dir_and_old_spellings_are_deprecated_aliases(command):
    for action in COMMANDS[command]._actions:
        for option in action.option_strings:
            if option in ("--out-dir", "--workdir", "--output-trace", "--report") or (
                    option == "-o" and action.dest != "output"):
                assert isinstance(action, _conventions._Deprecated) and _deprecated(command, option), (command, option)
                assert action.help is argparse.SUPPRESS
        if action.metavar == "DIR" and not isinstance(action, _conventions._Deprecated) and action.option_strings:
            assert action.option_strings in (["--output-dir"], ["--examples"]), (command, action.option_strings)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_format_names_are_the_shared_ones(command):
    for action in COMMANDS[command]._actions:
        if "--format" in action.option_strings:
            assert set(action.choices) <= set(_conventions.FORMATS), (command, action.choices)
            assert action.default in action.choices


@pytest.mark.parametrize("command", sorted(FINDINGS_COMMANDS))
def test_commands_that_report_findings_take_select_ignore_and_fail_on(command):
    options = {o for a in _visible(COMMANDS[command]) for o in a.option_strings}
    assert {"--select", "--ignore", "--fail-on"} <= options, command


@pytest.mark.parametrize(("argv", "dest", "value"), [
    (["dump", "-o", "d", "--", "python"], "output_dir", "d"),
    (["accept", "spec.toml", "--out-dir", "d"], "output_dir", "d"),
    (["comm", "--workdir", "d"], "output_dir", "d"),
    (["demo", "--workdir", "d"], "output_dir", "d"),
    (["profile", "--output-trace", "t.json", "--", "x.py"], "output_trace", "t.json"),
    (["profile", "--report", "r.txt", "--", "x.py"], "output", "r.txt"),
    (["inventory", ".", "--format", "md"], "format", "markdown"),
    (["migrate", ".", "--format", "text"], "format", "table"),
])
def test_old_spellings_still_work_and_say_what_replaced_them(argv, dest, value, capsys):
    args = build_parser().parse_args(argv)
    assert getattr(args, dest) == value
    err = capsys.readouterr().err
    if "--format" not in argv:
        assert "deprecated" in err and "next release" in err
