"""Writing migrated files: refuse to overwrite uncommitted work, then replace every file atomically."""

from __future__ import annotations

import logging
import os
import stat
import subprocess
from collections.abc import Sequence
from pathlib import Path

from accelport.errors import ParameterHint, UserError
from accelport.fileio import staged_writes
from accelport.migrate.model import FileMigration
from accelport.source.walk import TEMP_SUFFIX, inside, read_regular

log = logging.getLogger(__name__)


def _git_root(path: str) -> str:
    folder = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    try:
        found = subprocess.run(["git", "-C", folder, "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise ParameterHint(f"{path}: git is not installed, so uncommitted work cannot be protected; force the write to go ahead", "force") from None
    if found.returncode != 0:
        raise ParameterHint(f"{path}: not in a git work tree, so the rewrite could not be undone; commit it to git first or force the write", "force")
    return found.stdout.strip()


def _status(root: str, paths: Sequence[str], untracked: bool) -> list[str]:
    mode = "--untracked-files=all" if untracked else "--untracked-files=no"
    status = subprocess.run(
        ["git", "-C", root, "status", "--porcelain", mode, "--", *paths], capture_output=True, text=True, check=False
    )
    return [os.path.join(root, line[3:].strip().strip('"')) for line in status.stdout.splitlines() if line.strip()]


def uncommitted(roots: Sequence[str], targets: Sequence[str]) -> list[str]:
    """What stands between a write and an easy `git diff` / `git checkout` of it.

    Tracked files under `roots` (the paths given to migrate) with uncommitted changes, and
    files to be written (`targets`) that git does not track. Raises UserError when a path is
    not inside a git work tree: then nothing could undo the write.
    """
    dirty: set[str] = set()
    by_root: dict[str, tuple[list[str], list[str]]] = {}
    for path in roots:
        by_root.setdefault(_git_root(path), ([], []))[0].append(os.path.abspath(path))
    for path in targets:
        real = os.path.realpath(path)  # git must know the file that is written, not a link to it
        by_root.setdefault(_git_root(real), ([], []))[1].append(real)
    for root, (tree_paths, files) in by_root.items():
        if tree_paths:
            dirty.update(_status(root, tree_paths, untracked=False))
        if files:
            dirty.update(_status(root, files, untracked=True))
    return sorted(dirty)


def _encoded(migration: FileMigration, text: str) -> bytes:
    data = text.encode("utf-8", "surrogatepass")
    return b"\xef\xbb\xbf" + data if migration.bom else data


def write_files(files: Sequence[FileMigration], roots: Sequence[str] | None = None) -> list[str]:
    """Write every changed file: all new contents go to temporary files first, then each is
    renamed over its original. A failure before the renames leaves every original untouched.

    A symbolic link is followed (the file it points at is rewritten, the link stays) only
    while it leads to a file inside one of `roots` (the paths migrate was given; a file
    named there itself is allowed): discovery already leaves out links that lead elsewhere,
    and a link changed since then stops the run here. A file that changed on disk since it
    was read is not overwritten either: UserError, nothing written.
    """
    trees = [(os.path.realpath(root), os.path.isdir(root)) for root in roots or ()]
    with staged_writes(TEMP_SUFFIX) as staging:
        for migration in files:
            if not migration.changed or migration.disk_path is None:
                continue
            target = Path(os.path.realpath(migration.disk_path))
            if trees and not any(inside(str(target), tree) if folder else str(target) == tree for tree, folder in trees):
                raise UserError(
                    f"{migration.path}: now a symbolic link to {target}, outside the tree being migrated; "
                    "nothing was written; run migrate again"
                )
            if migration.creates:
                if os.path.lexists(migration.disk_path) or os.path.lexists(target):
                    raise UserError(f"{migration.path}: appeared on disk since migrate looked; run migrate again")
            else:
                try:
                    current = read_regular(str(target))  # never blocks, should a FIFO be there now
                except OSError:
                    current = None
                if current != _encoded(migration, migration.original):
                    raise UserError(f"{migration.path}: changed on disk since it was read; run migrate again")
            staging.stage(target, _encoded(migration, migration.migrated))
        written = [str(target) for _tmp, target in staging.pending]
    return written


def remove_stale_temp(paths: Sequence[str]) -> list[str]:
    """Delete the temporary files an earlier `--write` left when it was killed before renaming them.

    `paths` are what discovery found by name (`.NAME.XXXXXXXX.accelport.tmp`); only regular
    files are removed. Returns the ones removed.
    """
    removed = []
    for path in paths:
        try:
            if not stat.S_ISREG(os.lstat(path).st_mode):
                continue
            os.unlink(path)
        except FileNotFoundError:
            continue
        except OSError as exc:
            log.warning("%s: stale temporary file could not be removed (%s)", path, exc.strerror)
            continue
        removed.append(path)
    return removed
