"""Find the files to scan: honour .gitignore and excludes, skip VCS and virtualenv folders, survive symlink loops."""

from __future__ import annotations

import logging
import os
import re
import stat
import subprocess
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from accelport.errors import UserError
from accelport.findings import SkippedFile
from accelport.inventory.scanners import all_scanners, scanner_for

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
class Candidate:
    """A file some scanner claims: where it is on disk, how reports name it, and its size."""

    path: str
    display: str
    scanner: int  # index into all_scanners()
    size: int


@dataclass
class Discovery:
    files: list[Candidate]
    skipped: list[SkippedFile]
    excluded: int = 0  # files left out by .gitignore / excludes (not an error)


def _is_virtualenv(path: str) -> bool:
    return os.path.exists(os.path.join(path, "pyvenv.cfg")) or os.path.exists(os.path.join(path, "conda-meta"))


def _pyproject_excludes(root: Path) -> list[str]:
    pyproject = root / "pyproject.toml"
    if not pyproject.is_file():
        return []
    from accelport.knowledge import toml_parser  # only when the root has a pyproject.toml

    tomllib = toml_parser()
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
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
        with open(path, encoding="utf-8", errors="replace") as handle:
            lines = handle.read().splitlines()
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
) -> Discovery:
    """Every file under `roots` that a scanner claims, minus ignored ones; unreadable folders are skipped."""
    result = Discovery(files=[], skipped=[])
    scanners = all_scanners()
    index = {id(s): i for i, s in enumerate(scanners)}
    seen_files: set[tuple[int, int]] = set()
    for root_arg in roots:
        root = Path(root_arg)
        if not root.exists():
            if root.is_symlink():
                raise UserError(f"{root_arg}: is a broken symbolic link; point it at a file or folder")
            raise UserError(f"{root_arg}: no such file or directory; check the path")
        if not root.is_dir() and not root.is_file():
            raise UserError(f"{root_arg}: not a regular file or folder (a FIFO, socket or device); pass a folder or a source file")
        if root.is_file():
            scanner = scanner_for(root.name)
            if scanner is None:
                raise UserError(
                    f"{root_arg}: not a kind of file accelport scans; pass a folder or a source file "
                    f"({', '.join(sorted({s for sc in scanners for s in sc.suffixes}))})"
                )
            size = root.stat().st_size
            if size > max_file_size:
                result.skipped.append(SkippedFile(root_arg, _too_large(size, max_file_size)))
                continue
            result.files.append(Candidate(str(root), root_arg, index[id(scanner)], size))
            continue
        if not os.access(root, os.R_OK | os.X_OK):
            raise UserError(f"{root_arg}: folder cannot be read (permission denied)")
        check_excludes(excludes)
        project = _pyproject_excludes(root)
        check_excludes(project, f"{root / 'pyproject.toml'}: [tool.accelport] exclude")
        patterns = list(excludes) + project
        exclude_spec = _gitignore_spec(patterns) if patterns else None
        _walk(root_arg, str(root), result, exclude_spec, respect_gitignore, max_file_size, index, seen_files)
    return result


def _too_large(size: int, limit: int) -> str:
    return f"larger than the {limit // (1024 * 1024)} MiB limit ({size} bytes); raise it with --max-file-size"


def _walk(
    root_arg: str,
    root: str,
    result: Discovery,
    exclude_spec: pathspec.PathSpec | None,
    respect_gitignore: bool,
    max_file_size: int,
    index: dict[int, int],
    seen_files: set[tuple[int, int]],
) -> None:
    visited_dirs: set[tuple[int, int]] = set()
    tracked = _Tracked(root)
    # Each stack entry: (absolute dir, path relative to root, gitignore specs that apply: (base rel, spec))
    stack: list[tuple[str, str, tuple[tuple[str, pathspec.PathSpec], ...]]] = [(root, "", ())]
    while stack:
        directory, rel_dir, ignores = stack.pop()
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
                subdirs.append((entry.path, rel, ignores))
                continue
            scanner = scanner_for(entry.name)
            if scanner is None:
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
            if (fst.st_dev, fst.st_ino) in seen_files:
                continue  # the same file reached through a symlink
            seen_files.add((fst.st_dev, fst.st_ino))
            if not stat.S_ISREG(fst.st_mode):
                # A FIFO would block the scan; a device has no end.
                result.skipped.append(SkippedFile(display, "cannot be read: not a regular file (a FIFO, socket or device)"))
                continue
            if fst.st_size > max_file_size:
                result.skipped.append(SkippedFile(display, _too_large(fst.st_size, max_file_size)))
                continue
            result.files.append(Candidate(entry.path, display, index[id(scanner)], fst.st_size))
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
