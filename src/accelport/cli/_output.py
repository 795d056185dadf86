"""Terminal helpers shared by the commands: where output goes, colour, progress."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from accelport.errors import UserError
from accelport.fileio import atomic_write_bytes, atomic_write_text
from accelport.textsafe import Styled, terminal


def positive_int(text: str) -> int:
    """argparse type for counts such as --jobs: a whole number, at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def output_problem(path: str) -> str | None:
    """Why `path` cannot be written atomically (a rename from its folder), or None.

    Folders that do not exist yet are fine (they are created) when the nearest existing one is
    a writable folder. Cheap enough to check before a long run, so it fails before, not after.
    """
    if os.path.isdir(path):
        return "is a directory"
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.lexists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        return f"cannot be created ({parent} is not a directory)"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"cannot be created ({parent} is not writable)"
    return None


def check_output(path: str, option: str = "-o") -> None:
    """UserError naming `option` when `path` cannot be written."""
    problem = output_problem(path)
    if problem:
        raise UserError(f"{option} {path}: {problem}; give a writable file, or '-'")


def check_output_dir(option: str, path: str) -> None:
    """UserError naming `option` when `path` cannot be (or become) a writable folder."""
    if os.path.lexists(path) and not os.path.isdir(path):
        raise UserError(f"{option} {path}: is a file, not a folder; give a folder (it is created when missing)")
    nearest = os.path.abspath(path)
    while not os.path.lexists(nearest):
        nearest = os.path.dirname(nearest)
    if not os.path.isdir(nearest):
        raise UserError(f"{option} {path}: cannot be created ({nearest} is not a directory)")
    if not os.access(nearest, os.W_OK | os.X_OK):
        raise UserError(f"{option} {path}: cannot be created or written ({nearest} is not writable)")


def _why(path: Path, exc: OSError) -> str:
    """The reason a write failed, in the user's terms: a parent that is a file reads as such, not as 'File exists'."""
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                return f"{parent} is a file, not a folder"
            break
    return exc.strerror or str(exc)


def emit(content: str | bytes, output: str | None, option: str = "-o", *, raw: bool = False, styled: bool = False) -> None:
    """Print `content`, or write it atomically to `output` when one is given ('-' is stdout).

    `option` names the command-line option `output` came from, for the error message.
    Text printed to stdout goes through the terminal sanitizer (`accelport.textsafe`), so a
    renderer that let a file name's ESC sequence through still cannot drive the terminal;
    `styled` keeps accelport's own colours, `raw` prints exact bytes (a diff to apply).
    Files are written exactly as rendered.
    """
    if output and output != "-":
        path = Path(output)
        if path.is_dir():
            raise UserError(f"{option} {output}: is a directory; give a file name for {option}")
        try:
            if isinstance(content, bytes):
                atomic_write_bytes(path, content)
            else:
                atomic_write_text(path, content)
        except OSError as exc:
            raise UserError(f"{option} {output}: cannot write ({_why(path, exc)}); choose another {option} path") from None
        return
    if isinstance(content, bytes):
        sys.stdout.buffer.write(content)
    else:
        sys.stdout.write(content if raw else terminal(content, styled=styled))
    sys.stdout.flush()


def use_color(stream=None) -> bool:
    stream = stream or sys.stdout
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    return hasattr(stream, "isatty") and stream.isatty()


class Style:
    """ANSI styling that turns itself off when output is not a terminal."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def _wrap(self, code: str, text: str) -> str:
        return Styled(f"\033[{code}m{text}\033[0m") if self.enabled else text

    def bold(self, text: str) -> str:
        return self._wrap("1", text)

    def dim(self, text: str) -> str:
        return self._wrap("2", text)

    def red(self, text: str) -> str:
        return self._wrap("31", text)

    def green(self, text: str) -> str:
        return self._wrap("32", text)

    def yellow(self, text: str) -> str:
        return self._wrap("33", text)

    def cyan(self, text: str) -> str:
        return self._wrap("36", text)


class Progress:
    """A one-line progress bar on stderr, shown only on a terminal and only for long runs."""

    def __init__(self, total: int, label: str, min_total: int = 200) -> None:
        self.total = total
        self.label = label
        self.done = 0
        self.enabled = total >= min_total and sys.stderr.isatty()
        self._last = 0.0

    def advance(self, count: int = 1) -> None:
        self.done += count
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._last < 0.1 and self.done < self.total:
            return
        self._last = now
        width = 30
        filled = int(width * self.done / max(self.total, 1))
        sys.stderr.write(f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total}")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\r" + " " * 79 + "\r")
            sys.stderr.flush()


def check_range(option: str, value: float | int | None, *, low: float | None = None, high: float | None = None,
                low_open: bool = False, high_open: bool = False) -> None:
    """UserError naming `option` when `value` (None: not given) lies outside [low, high] (open ends when told)."""
    if value is None:
        return
    too_low = low is not None and (value <= low if low_open else value < low)
    too_high = high is not None and (value >= high if high_open else value > high)
    if too_low or too_high:
        left = "" if low is None else f"{low:g} {'<' if low_open else '<='} "
        right = "" if high is None else f" {'<' if high_open else '<='} {high:g}"
        raise UserError(f"{option} {value:g}: must be {left}{option.lstrip('-')}{right}")


def check_save_path(option: str, output: str | None) -> Path | None:
    """Refuse a --save path that cannot be written before the (maybe hours-long) run starts."""
    if not output:
        return None
    path = Path(output)
    if path.is_dir():
        raise UserError(f"{option} {output}: is a directory; give a file name")
    if not path.parent.is_dir():
        raise UserError(f"{option} {output}: folder {path.parent} does not exist; create it or choose another path")
    if not os.access(path.parent, os.W_OK):
        raise UserError(f"{option} {output}: folder {path.parent} is not writable; choose another path")
    return path


def save_text(option: str, path: Path | None, text: str) -> None:
    """Write `text` atomically to `path` (from `check_save_path`); an OS error is one line naming the option."""
    if path is None:
        return
    try:
        atomic_write_text(path, text)
    except OSError as exc:
        raise UserError(f"{option} {path}: cannot write ({_why(path, exc)}); choose another path") from None
