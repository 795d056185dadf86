"""Find the files to scan: honour .gitignore and excludes, skip VCS and virtualenv folders, survive symlink loops.

Only regular files are ever opened (a FIFO named x.py would block a reader forever), and
each file reached through a symbolic link that leads out of the tree it was found in
carries that target, so that migrate can refuse to write there.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import stat
import subprocess
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from accelport.errors import UserError
from accelport.findings import SkippedFile

if TYPE_CHECKING:
    import pathspec


log = logging.getLogger(__name__)

DEFAULT_MAX_FILE_SIZE = 8 * 1024 * 1024

# Folders that never hold the user's own source.
SKIP_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        ".bzr",
        "__pycache__",
        "node_modules",
        ".tox",
        ".nox",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".ipynb_checkpoints",
        "site-packages",
        "dist-packages",
        ".eggs",
    }
)


@dataclass(frozen=True, slots=True)
class FileKind(Protocol):
    """A kind of file the caller reads (inventory passes its scanners): which names it claims."""

    suffixes: tuple[str, ...]

    def claims(self, filename: str) -> bool: ...


def kind_of(kinds: Sequence[FileKind], filename: str) -> int | None:
    """Index of the first kind that claims `filename` (first claim wins), or None."""
    for i, kind in enumerate(kinds):
        if kind.claims(filename):
            return i
    return None


@dataclass
class Candidate:
    """A file some scanner claims: where it is on disk, how reports name it, and its size."""

    path: str
    display: str
    scanner: int  # index into the kinds passed to discover (inventory: all_scanners())
    size: int
    outside: str | None = None  # where a symbolic link on the way leads, when that is outside the tree


@dataclass
class Discovery:
    files: list[Candidate]
    skipped: list[SkippedFile]
    excluded: int = 0  # files left out by .gitignore / excludes (not an error)
    stale_temp: list[str] = field(default_factory=list)  # migrate --write's temporary files left by a killed run


# What migrate --write's staged files are called: `.NAME.` + mkstemp's 8 characters + this.
TEMP_SUFFIX = ".accelport.tmp"
_STALE_TEMP = re.compile(r"\..+\.[A-Za-z0-9_]{8}" + re.escape(TEMP_SUFFIX))
_KINDS = {
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFDIR: "a folder",
}


def not_regular(mode: int) -> str | None:
    """Why a file of this st_mode is not read (FIFO, socket, device), or None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    return f"not a regular file ({_KINDS.get(stat.S_IFMT(mode), 'a special file')}); skipped, never opened"


def read_regular(path: str, size: int = 0) -> bytes:
    """The whole of a regular file, in one read call when it is `size` bytes.

    Opened without blocking and checked again after the open: a FIFO or device put in a
    file's place after it was listed raises OSError (EINVAL) instead of hanging the reader.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0) | getattr(os, "O_NONBLOCK", 0))
    try:
        problem = not_regular(os.fstat(fd).st_mode)
        if problem:
            raise OSError(errno.EINVAL, problem, path)
        parts = [os.read(fd, size + 1)]
        while parts[-1]:  # read to the end even if the file changed since it was listed
            parts.append(os.read(fd, 1 << 20))
    finally:
        os.close(fd)
    return parts[0] if len(parts) == 2 else b"".join(parts)


def inside(real: str, tree: str) -> bool:
    """Is the resolved path `real` the resolved path `tree`, or below it?"""
    return real == tree or real.startswith(tree.rstrip(os.sep) + os.sep)


def _is_virtualenv(path: str) -> bool:
    return os.path.exists(os.path.join(path, "pyvenv.cfg")) or os.path.exists(os.path.join(path, "conda-meta"))


def _pyproject_excludes(root: Path) -> list[str]:
    pyproject = root / "pyproject.toml"
    if not pyproject.is_file():
        return []
    from accelport.knowledge import toml_parser  # only when the root has a pyproject.toml

    tomllib = toml_parser()
    try:
        data = tomllib.loads(read_regular(str(pyproject)).decode("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        log.warning("%s: ignoring [tool.accelport]: %s", pyproject, exc)
        return []
    excludes = data.get("tool", {}).get("accelport", {}).get("exclude", [])
    if isinstance(excludes, str):
        excludes = [excludes]
    if not isinstance(excludes, list) or not all(isinstance(e, str) for e in excludes):
        raise UserError(f"{pyproject}: [tool.accelport] exclude must be a list of glob strings")
    return excludes


def _gitignore_spec(lines: Iterable[str]) -> pathspec.PathSpec:
    import pathspec  # only for trees with a .gitignore or excludes

    return pathspec.GitIgnoreSpec.from_lines(lines)


def _pattern_problem(pattern: str) -> str | None:
    """Why a gitignore-style pattern given to exclude files would not work, or None."""
    try:
        spec = _gitignore_spec([pattern])
    except (ValueError, re.error) as exc:
        return f"not a valid gitignore-style pattern ({exc})"
    if not spec.patterns or all(p.include is None for p in spec.patterns):
        return "matches nothing (blank, a comment, or an unclosed '[')"
    return None


def check_excludes(patterns: Iterable[str], origin: str = "--exclude") -> None:
    """UserError naming the first exclude pattern that is invalid or can never match."""
    for pattern in patterns:
        problem = _pattern_problem(pattern)
        if problem:
            raise UserError(f"{origin} {pattern!r}: {problem}; write a gitignore-style pattern such as 'build/' or '*_test.py'")


def _read_gitignore(directory: str) -> pathspec.PathSpec | None:
    path = os.path.join(directory, ".gitignore")
    try:
        lines = read_regular(path).decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    try:
        spec = _gitignore_spec(lines)
    except (ValueError, re.error):
        # git skips a line it cannot parse; do the same, line by line.
        log.warning("%s: ignoring patterns that are not valid gitignore syntax", path)
        spec = _gitignore_spec([line for line in lines if _valid(line)])
    return spec if spec.patterns else None


def _valid(line: str) -> bool:
    try:
        _gitignore_spec([line])
    except (ValueError, re.error):
        return False
    return True


def _display(root_arg: str, rel: str) -> str:
    if root_arg in (".", "./"):
        return rel
    return os.path.join(root_arg, rel) if rel else root_arg


def discover(
    roots: Sequence[str],
    *,
    excludes: Iterable[str] = (),
    respect_gitignore: bool = True,
    max_file_size: int = DEFAULT_MAX_FILE_SIZE,
    kinds: Sequence[FileKind],
) -> Discovery:
    """Every file under `roots` that one of `kinds` claims, minus ignored ones; unreadable folders are skipped."""
    result = Discovery(files=[], skipped=[])
    seen_files: dict[tuple[int, int], int | None] = {}  # -> index in files, None when not listed
    for root_arg in roots:
        root = Path(root_arg)
        if not root.exists():
            if root.is_symlink():
                raise UserError(f"{root_arg}: is a broken symbolic link; point it at a file or folder")
            raise UserError(f"{root_arg}: no such file or directory; check the path")
        mode = root.stat().st_mode
        if not stat.S_ISDIR(mode) and not_regular(mode):
            kind = _KINDS.get(stat.S_IFMT(mode), "a special file")
            raise UserError(f"{root_arg}: is {kind}, not a source file or folder; pass a folder or a source file")
        if root.is_file():
            scanner = kind_of(kinds, root.name)
            if scanner is None:
                raise UserError(
                    f"{root_arg}: not a kind of file accelport scans; pass a folder or a source file "
                    f"({', '.join(sorted({s for kind in kinds for s in kind.suffixes}))})"
                )
            size = root.stat().st_size
            if size > max_file_size:
                result.skipped.append(SkippedFile(root_arg, _too_large(size, max_file_size)))
                continue
            result.files.append(Candidate(str(root), root_arg, scanner, size))
            continue
        if not os.access(root, os.R_OK | os.X_OK):
            raise UserError(f"{root_arg}: folder cannot be read (permission denied)")
        check_excludes(excludes)
        project = _pyproject_excludes(root)
        check_excludes(project, f"{root / 'pyproject.toml'}: [tool.accelport] exclude")
        patterns = list(excludes) + project
        exclude_spec = _gitignore_spec(patterns) if patterns else None
        _walk(root_arg, str(root), result, exclude_spec, respect_gitignore, max_file_size, kinds, seen_files)
    return result


def _too_large(size: int, limit: int) -> str:
    return f"larger than the {limit // (1024 * 1024)} MiB limit ({size} bytes); raise max_file_size to scan it"


def _walk(
    root_arg: str,
    root: str,
    result: Discovery,
    exclude_spec: pathspec.PathSpec | None,
    respect_gitignore: bool,
    max_file_size: int,
    kinds: Sequence[FileKind],
    seen_files: dict[tuple[int, int], int | None],
) -> None:
    visited_dirs: set[tuple[int, int]] = set()
    tracked = _Tracked(root)
    tree = os.path.realpath(root)
    # Each stack entry: (absolute dir, path relative to root, gitignore specs that apply: (base rel, spec),
    # whether a symbolic link lies on the way from the root: then each file's real path is looked up)
    stack: list[tuple[str, str, tuple[tuple[str, pathspec.PathSpec], ...], bool]] = [(root, "", (), False)]
    while stack:
        directory, rel_dir, ignores, linked = stack.pop()
        try:
            st = os.stat(directory)
        except OSError as exc:
            result.skipped.append(SkippedFile(_display(root_arg, rel_dir), f"folder cannot be read ({exc.strerror})"))
            continue
        key = (st.st_dev, st.st_ino)
        if key in visited_dirs:
            continue  # a symlink loop, or the same folder reached twice
        visited_dirs.add(key)
        if respect_gitignore:
            spec = _read_gitignore(directory)
            if spec is not None:
                ignores = (*ignores, (rel_dir, spec))
        try:
            with os.scandir(directory) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            result.skipped.append(SkippedFile(_display(root_arg, rel_dir) or root_arg, f"folder cannot be read ({exc.strerror})"))
            continue
        subdirs = []
        for entry in entries:
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            try:
                is_dir = entry.is_dir()  # follows symlinks
            except OSError:
                is_dir = False
            if is_dir:
                if entry.name in SKIP_DIRS or _is_virtualenv(entry.path):
                    continue
                if _ignored(rel + "/", ignores, exclude_spec, tracked.dirs):
                    continue
                subdirs.append((entry.path, rel, ignores, linked or entry.is_symlink()))
                continue
            scanner = kind_of(kinds, entry.name)
            if scanner is None:
                if entry.name.endswith(TEMP_SUFFIX) and _STALE_TEMP.fullmatch(entry.name):
                    result.stale_temp.append(entry.path)
                continue
            if _ignored(rel, ignores, exclude_spec, tracked.files):
                result.excluded += 1
                continue
            display = _display(root_arg, rel)
            try:
                fst = entry.stat()
            except OSError as exc:
                if entry.is_symlink():
                    result.skipped.append(SkippedFile(display, "broken symbolic link"))
                else:
                    result.skipped.append(SkippedFile(display, f"cannot be read ({exc.strerror})"))
                continue
            problem = not_regular(fst.st_mode)
            if problem:
                result.skipped.append(SkippedFile(display, problem))
                continue
            outside = None
            if linked or entry.is_symlink():
                real = os.path.realpath(entry.path)
                outside = None if inside(real, tree) else real
            key = (fst.st_dev, fst.st_ino)
            if key in seen_files:
                # The same file reached again through a symlink: keep the way that stays inside a tree.
                earlier = seen_files[key]
                if earlier is not None and outside is None and result.files[earlier].outside is not None:
                    result.files[earlier] = Candidate(entry.path, display, scanner, fst.st_size)
                continue
            seen_files[key] = None
            if fst.st_size > max_file_size:
                result.skipped.append(SkippedFile(display, _too_large(fst.st_size, max_file_size)))
                continue
            seen_files[key] = len(result.files)
            result.files.append(Candidate(entry.path, display, scanner, fst.st_size, outside))
        # Reverse so the stack pops folders in name order.
        stack.extend(reversed(subdirs))


def _ignored(
    rel: str,
    ignores: tuple[tuple[str, pathspec.PathSpec], ...],
    exclude_spec: pathspec.PathSpec | None,
    tracked: Callable[[], frozenset[str]] | None = None,
) -> bool:
    if exclude_spec is not None and exclude_spec.match_file(rel):
        return True
    for base, spec in ignores:
        sub = rel[len(base) + 1 :] if base else rel
        if spec.match_file(sub):
            # As in git, .gitignore does not hide what the repository tracks (DeepSpeed ignores `*.cuh`
            # and tracks 40 of them).
            return tracked is None or rel.rstrip("/") not in tracked()
    return False


class _Tracked:
    """The files git tracks under a root (and their folders), asked of git once, only when an ignore rule matches."""

    def __init__(self, root: str) -> None:
        self.root = root
        self._files: frozenset[str] | None = None
        self._dirs: frozenset[str] = frozenset()

    def _load(self) -> None:
        if self._files is not None:
            return
        self._files = frozenset()
        try:
            done = subprocess.run(
                ["git", "-C", self.root, "ls-files", "-z"], capture_output=True, timeout=60, check=False
            )
        except (OSError, subprocess.SubprocessError):
            return  # no git: .gitignore rules apply to every file
        if done.returncode != 0:
            return  # not a git work tree
        files = frozenset(os.fsdecode(p) for p in done.stdout.split(b"\0") if p)
        self._files = files
        self._dirs = frozenset(d for f in files for d in _parents(f))

    def files(self) -> frozenset[str]:
        self._load()
        return self._files or frozenset()

    def dirs(self) -> frozenset[str]:
        self._load()
        return self._dirs


def _parents(rel: str) -> list[str]:
    parts = rel.split("/")[:-1]
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]
