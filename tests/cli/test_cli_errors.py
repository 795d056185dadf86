"""Errors a user can cause end in one line and exit 2, whichever command hits them (the CLI's one error mapping)."""

from __future__ import annotations

import argparse
import os

import pytest

from accelport import cli as cli_package
from accelport.findings import Category


def _one_line(result, *needles: str) -> None:
    assert result.code == 2, (result.code, result.err)
    assert "Traceback" not in result.err and len(result.err.strip().splitlines()) == 1, result.err
    for needle in needles:
        assert needle in result.err, result.err


def test_an_unknown_rule_category_is_exit_2_listing_the_known_ones(cli):
    result = cli("rules", "--category", "nosuch")
    _one_line(result, "--category nosuch: no such category", *(c.value for c in Category))
    assert cli("rules", "--category", "kernel").code == 0


def test_accept_refuses_an_out_dir_that_is_a_file_before_running(cli, tmp_path):
    taken = tmp_path / "report"
    taken.write_text("keep me\n")
    spec = tmp_path / "spec.toml"
    spec.write_text('[[performance]]\nresult = "missing.json"\nbaseline = "missing.json"\n')
    _one_line(cli("accept", spec, "--output-dir", taken), f"--output-dir {taken}: is a file, not a folder")
    assert taken.read_text() == "keep me\n"
    _one_line(cli("accept", spec, "--output-dir", taken / "sub"), f"{taken} is not a directory")


def test_curves_on_an_unreadable_file_is_one_line(cli, tmp_path):
    log = tmp_path / "loss.csv"
    if os.geteuid() == 0:
        log.symlink_to("/proc/sys/vm/drop_caches")  # write-only even for root, who reads mode-000 files
    else:
        log.write_text("step,loss\n0,1\n")
        log.chmod(0)
    _one_line(cli("curves", log, log), str(log), "cannot read the training log")


def test_pools_validate_of_a_binary_file_is_one_line(cli, tmp_path):
    binary = tmp_path / "job.sbatch"
    binary.write_bytes(b"#!/bin/bash\n\xff\xfe\x00\x80")
    _one_line(cli("pools", "validate", "--files", binary), str(binary), "not UTF-8 text")


@pytest.fixture
def failing_command(monkeypatch):
    """`rules` made to raise `error` from inside its handler, as a deeper library call would."""

    def install(error: BaseException) -> None:
        from accelport.cli import rules

        def handler(args: argparse.Namespace) -> int:
            raise error

        monkeypatch.setattr(rules, "run", handler)
        original = rules.register

        def register(subparsers):
            original(subparsers)
            subparsers.choices["rules"].set_defaults(handler=handler)

        monkeypatch.setattr(rules, "register", register)

    return install


def test_an_os_error_on_a_named_file_is_one_line_naming_it(cli, failing_command):
    failing_command(PermissionError(13, "Permission denied", "/data/run.csv"))
    _one_line(cli("rules"), "/data/run.csv: Permission denied")


@pytest.mark.parametrize(("module", "package", "extra"), [("triton", "triton", "kernels"), ("yaml.loader", "pyyaml", "pools")])
def test_an_optional_package_missing_deep_inside_is_the_install_line(cli, failing_command, module, package, extra):
    failing_command(ModuleNotFoundError(f"No module named {module!r}", name=module))
    _one_line(cli("rules"), f"accelport rules needs {package}; install it with `pip install 'accelport[{extra}]'`")


def test_a_bug_is_still_a_traceback(cli, failing_command):
    """The mapping covers what a user can fix; accelport's own errors must stay visible."""
    failing_command(ModuleNotFoundError("No module named 'accelport.nosuch'", name="accelport.nosuch"))
    with pytest.raises(ModuleNotFoundError):
        cli("rules")
    failing_command(OSError("no file involved"))
    with pytest.raises(OSError):
        cli("rules")


def test_the_exit_codes_help_names_missing_packages():
    assert "optional package" in cli_package.EXIT_CODES_HELP
