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


class InvalidValue(UserError):
    """A value outside what a library function accepts, named by the function's own parameter.

    Library code speaks of its parameters (``replay_ratio``), never of command-line flags;
    the CLI finds the flag that fed `parameter` (the argparse ``dest``) and words the line
    as ``--replay-ratio 0: ...``. Called from Python, the line reads ``replay_ratio=0: ...``.
    """

    def __init__(self, parameter: str, value: object, problem: str) -> None:
        self.parameter = parameter
        self.value = value
        self.problem = problem
        super().__init__(f"{parameter}={value}: {problem}")


class ParameterHint(UserError):
    """A UserError whose fix is another value for one of the function's parameters (a table path, `force`).

    The message says what is wrong and what to do in the library's words; the parameter is named after it,
    ``(table)`` called from Python, and the CLI names the flag that feeds it instead: ``(--table)``.
    """

    def __init__(self, message: str, parameter: str) -> None:
        self.message = message
        self.parameter = parameter
        super().__init__(f"{message} ({parameter})")
