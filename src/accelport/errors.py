"""Errors a user can cause; the CLI turns them into one line and exit code 2."""

from __future__ import annotations


class UserError(Exception):
    """Bad input from the user: a missing path, a file that does not parse, an invalid spec.

    The message is one line that names the file and says what to do.
    """

    exit_code = 2


class MissingDependency(UserError):
    """An optional dependency (torch, triton, ...) is needed for this command."""

    def __init__(self, package: str, extra: str, purpose: str) -> None:
        super().__init__(
            f"{purpose} needs {package}; install it with `pip install 'accelport[{extra}]'`"
        )
        self.package = package
