"""Shared test fixtures: run the CLI in-process and capture what it prints."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

# Tests never load a vendor adapter by accident (a half-installed one breaks `import torch`).
os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
# Triton fixes interpreter mode when it is first imported; whichever test area imports it
# first, kernels must run under the interpreter here (no GPU). Compile checks use child processes.
os.environ.setdefault("TRITON_INTERPRET", "1")

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"


@dataclass
class CliResult:
    code: int
    out: str
    err: str


@pytest.fixture
def cli(capsys):
    """Run `accelport ARGS...` in this process; returns exit code, stdout and stderr."""
    from accelport.cli import main

    def run(*args: str) -> CliResult:
        try:
            code = main([str(a) for a in args])
        except SystemExit as exc:  # argparse errors and --help
            code = exc.code if isinstance(exc.code, int) else 2
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run


@pytest.fixture
def fifo_watchdog():
    """`with fifo_watchdog(path) as hung:` — if the body is still running after `seconds`, the FIFO is
    opened for writing (and closed) until the body ends, so a reader blocked on it gets EOF instead of
    hanging the test run; `hung` is then set, for the test to fail on."""
    import contextlib
    import threading
    import time

    @contextlib.contextmanager
    def watch(path, seconds: float = 10.0):
        done = threading.Event()
        hung = threading.Event()

        def unblock() -> None:
            if done.wait(seconds):
                return
            hung.set()
            while not done.is_set():
                with contextlib.suppress(OSError):  # no reader yet
                    os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
                time.sleep(0.05)

        thread = threading.Thread(target=unblock, daemon=True)
        thread.start()
        try:
            yield hung
        finally:
            done.set()
            thread.join()

    return watch
