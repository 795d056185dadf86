"""Atomic file writes (a reader sees the old file or the new one, never half of one), bounded reads of the
files a user names, and the user cache folder."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO


@contextmanager
def atomic_open(path: str | os.PathLike[str], mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Open a temporary file beside `path`; on success fsync and rename it over `path`."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    binary = "b" in mode
    fd, tmp = _temporary_beside(target, ".tmp")
    try:
        with os.fdopen(fd, mode, encoding=None if binary else encoding) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        _take_mode(tmp, target)
        os.replace(tmp, target)
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _temporary_beside(target: Path, suffix: str) -> tuple[int, str]:
    import tempfile  # imported here: most commands never write a file

    return tempfile.mkstemp(prefix=f".{target.name}.", suffix=suffix, dir=target.parent)


def _take_mode(tmp: str, target: Path) -> None:
    if target.exists():
        # Keep the permissions of the file being replaced (scripts stay executable).
        os.chmod(tmp, target.stat().st_mode & 0o7777)
    else:
        os.chmod(tmp, 0o644)


class Staging:
    """Files written in full beside their targets, renamed over them together when `staged_writes` ends."""

    def __init__(self, suffix: str) -> None:
        self.suffix = suffix
        self.pending: list[tuple[str, Path]] = []  # (temporary file, target), in the order staged

    def stage(self, path: str | os.PathLike[str], data: bytes) -> str:
        """Write `data` durably to a temporary file beside `path` (whose folder must exist); returns its name.

        The temporary file takes the permissions of the file it will replace (0o644 for a new one).
        """
        target = Path(path)
        fd, tmp = _temporary_beside(target, self.suffix)
        self.pending.append((tmp, target))
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        _take_mode(tmp, target)
        return tmp

    def _discard(self) -> None:
        for tmp, _target in self.pending:
            with suppress(FileNotFoundError):
                os.unlink(tmp)


@contextmanager
def staged_writes(suffix: str = ".tmp") -> Iterator[Staging]:
    """Write several files all or nothing: each `stage` writes a temporary file beside its target,
    and only when the block ends without an error are they renamed over their targets, in order.

    An error anywhere in the block (a file that cannot be staged, a check that fails after some
    were) removes every temporary file and changes no target. `suffix` names the temporary files
    (`.NAME.XXXXXXXX` + suffix), so a run killed before the renames leaves files one can find.
    """
    staging = Staging(suffix)
    try:
        yield staging
        while staging.pending:
            tmp, target = staging.pending[0]
            os.replace(tmp, target)
            staging.pending.pop(0)
    except BaseException:
        staging._discard()
        raise


@contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary path beside `path` for a tool that writes by file name (a compiler, torch's
    trace export); renamed over `path` when the block ends without an error, removed otherwise.
    A block that leaves nothing at the temporary path changes nothing."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        if tmp.exists():
            os.replace(tmp, target)
    finally:
        with suppress(FileNotFoundError):
            os.unlink(tmp)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    with atomic_open(path, "w") as handle:
        handle.write(text)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    with atomic_open(path, "wb", encoding=None) as handle:
        handle.write(data)


def user_cache_dir(name: str) -> Path | None:
    """accelport's cache folder for `name` ($XDG_CACHE_HOME or ~/.cache), or None when ACCELPORT_NO_CACHE is set."""
    if os.environ.get("ACCELPORT_NO_CACHE"):
        return None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "accelport" / name


# Inputs such as specs, mapping files, operator lists and saved results are small; a file
# far beyond this is not one of them (or is a sparse file that would fill the memory).
MAX_INPUT_BYTES = 64 << 20


def open_regular(path: str | os.PathLike[str], what: str, hint: str = "check the path",
                 missing: str | None = None, shown: object = None) -> int:
    """A read-only descriptor of `path`, which must be a regular file; UserError in one line otherwise.

    It is opened without waiting for a writer (a FIFO would block an ordinary open forever),
    then refused unless regular. `missing` replaces the not-found message; `shown` is the
    name the messages give (default: `path`).
    """
    from accelport.errors import UserError

    name = path if shown is None else shown
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise UserError(missing or f"{name}: {what} not found; {hint}") from None
    except OSError as exc:
        raise UserError(f"{name}: cannot read the {what} ({exc.strerror or exc}); {hint}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = "is a directory" if stat.S_ISDIR(mode) else "not a regular file: a FIFO, socket or device"
        raise UserError(f"{name}: cannot read the {what} ({kind}); {hint}")
    return fd


def read_input(path: str | os.PathLike[str], what: str, limit: int = MAX_INPUT_BYTES, hint: str = "check the path") -> bytes:
    """The bytes of a file the user named, or UserError in one line naming it and `what` it should be.

    Only a regular file is read: a FIFO would block (it is opened without waiting for a
    writer, then refused), a folder or device is refused by name. A file over `limit` bytes
    is refused before anything is read, so a huge or sparse file costs nothing.
    """
    from accelport.errors import UserError

    fd = open_regular(path, what, hint)
    try:
        info = os.fstat(fd)
        if info.st_size > limit:
            raise UserError(
                f"{path}: {info.st_size} bytes, over the {limit >> 20} MiB limit for the {what}; {hint}"
            )
        chunks = []
        total = 0
        while True:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:  # it grew while being read
                raise UserError(f"{path}: over the {limit >> 20} MiB limit for the {what}; {hint}")
        return b"".join(chunks)
    except OSError as exc:
        raise UserError(f"{path}: cannot read the {what} ({exc.strerror or exc}); {hint}") from None
    finally:
        os.close(fd)


def read_input_text(path: str | os.PathLike[str], what: str, limit: int = MAX_INPUT_BYTES, hint: str = "check the path") -> str:
    """`read_input` decoded as UTF-8; a file that is not UTF-8 text is UserError naming the first bad byte."""
    from accelport.errors import UserError

    data = read_input(path, what, limit, hint)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: the {what} is not UTF-8 text (byte {exc.start}); {hint}") from None
