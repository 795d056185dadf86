"""Hand a rendered job to its engine: `sbatch FILE` or `kubectl create -f FILE`, or only say so."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from accelport.errors import ParameterHint
from accelport.fileio import atomic_write_text
from accelport.pools.render import Artefact


@dataclass(frozen=True)
class Submission:
    argv: tuple[str, ...]
    path: str
    dry_run: bool
    returncode: int | None = None
    output: str = ""

    def to_dict(self) -> dict[str, object]:
        return {"argv": list(self.argv), "file": self.path, "dry_run": self.dry_run, "returncode": self.returncode, "output": self.output}


def submit_argv(artefact: Artefact, path: Path) -> list[str]:
    if artefact.kind == "sbatch":
        return ["sbatch", "--parsable", str(path)]
    if artefact.kind == "manifest":
        return ["kubectl", "create", "--filename", str(path)]
    raise ValueError(f"{artefact.filename} is not something to submit")


def submit(artefact: Artefact, workdir: str | Path, *, dry_run: bool = False, timeout: float = 120.0) -> Submission:
    """Write the artefact under `workdir` and submit it; with `dry_run`, write it and return the command only."""
    path = Path(workdir) / artefact.filename
    atomic_write_text(path, artefact.text)
    argv = submit_argv(artefact, path)
    if dry_run:
        return Submission(tuple(argv), str(path), True)
    if shutil.which(argv[0]) is None:
        raise ParameterHint(f"{argv[0]} not found on PATH; install the {argv[0]} client, or make a dry run to see the command", "dry_run")
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=timeout)
    return Submission(tuple(argv), str(path), False, done.returncode, (done.stdout + done.stderr).strip())
