"""Small C helpers, compiled with the system C compiler at first use and cached per machine.

A helper is one C file in the package. `load_library` builds it once into the user's
cache folder (~/.cache/accelport/native), under a name keyed by a hash of the source,
the compiler, the build commands and the machine, and loads it with ctypes (which
releases the GIL during each call). Every caller keeps a pure-Python or numpy path for
machines without a compiler: a helper only ever makes accelport faster, never different.
ACCELPORT_NATIVE=0 turns every helper off.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import threading
import zlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

from accelport.fileio import user_cache_dir

log = logging.getLogger(__name__)

ENV_VAR = "ACCELPORT_NATIVE"
T = TypeVar("T")
# A build step: a command whose words may name "{src}", "{obj}" and "{out}".
Step = Sequence[str]


class Once(Generic[T]):
    """A compiled helper loaded at most once per process.

    `get()` builds and loads it on first use (`load()`), and returns None when it is turned
    off (ACCELPORT_NATIVE or one of `variables` set to 0) or could not be loaded: callers
    then take their Python path.
    """

    def __init__(self, load: Callable[[], T], logger: logging.Logger, message: str, *variables: str) -> None:
        self._load = load
        self._log = logger
        self._message = message  # logged at INFO with the reason when loading fails: "...(%s)..."
        self.variables = variables
        self._lock = threading.Lock()
        self._loaded: T | None = None
        self._tried = False

    def get(self) -> T | None:
        if disabled(*self.variables):
            return None
        if self._tried:
            return self._loaded
        with self._lock:
            if not self._tried:
                try:
                    self._loaded = self._load()
                except Exception as exc:  # any failure means: the Python path
                    self._log.info(self._message, exc)
                    self._loaded = None
                self._tried = True
        return self._loaded

    def reset(self) -> None:
        """Forget what was loaded (tests use it to exercise building and the fallback)."""
        with self._lock:
            self._loaded, self._tried = None, False


def disabled(*variables: str) -> bool:
    """Has the user turned compiled helpers off (ACCELPORT_NATIVE, or a helper's own variable, set to 0/no/off/false)?"""
    return any(
        os.environ.get(name, "1").strip().lower() in ("0", "no", "off", "false") for name in (ENV_VAR, *variables)
    )


def compiler() -> list[str] | None:
    """The C compiler: $CC, else cc, gcc or clang on PATH."""
    named = os.environ.get("CC")
    if named:
        import shlex

        return shlex.split(named)
    folders = os.environ.get("PATH", os.defpath).split(os.pathsep)
    for name in ("cc", "gcc", "clang"):
        for folder in folders:
            found = os.path.join(folder or ".", name)
            if os.path.isfile(found) and os.access(found, os.X_OK):
                return [found]  # shutil.which, without importing shutil at every start-up
    return None


def cpu_id() -> str:
    """What -march=native depends on: the CPU's feature flags where the OS lists them."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith(("flags", "Features")):
                    return line
    except OSError:
        pass
    import platform

    return platform.processor()


def load_library(
    stem: str,
    source: Path,
    attempts: Sequence[Sequence[Step]],
    *,
    key: Sequence[str] = (),
) -> tuple[ctypes.CDLL, Path]:
    """Build `source` (the first of `attempts` whose steps all succeed) unless cached, and load it.

    `key` holds whatever else the built file depends on (a CPU id for -march=native, the
    path of a runtime it links against). Raises RuntimeError when there is no compiler
    or nothing builds; callers fall back to their slow path.
    """
    with _built(stem, source, attempts, key, ".so") as path:
        return ctypes.CDLL(str(path)), path


def load_extension(name: str, source: Path, attempts: Sequence[Sequence[Step]], *, key: Sequence[str] = ()) -> Any:
    """Build `source` as the CPython extension module `name` (unless cached) and import it.

    For helpers that work on Python objects (a ctypes call costs a microsecond; a call
    into an extension, a few dozen nanoseconds). The build must find Python's headers:
    `python_include()` gives the folder. Raises RuntimeError like `load_library`.
    """
    import importlib.machinery
    import importlib.util
    import sys

    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    with _built(name.rpartition(".")[2], source, attempts, (*key, sys.version), suffix) as path:
        loader = importlib.machinery.ExtensionFileLoader(name, str(path))
        spec = importlib.util.spec_from_loader(name, loader)
        if spec is None:
            raise RuntimeError(f"{path}: not loadable as {name}")
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
        return module


def python_include() -> str | None:
    """The folder holding Python.h for this interpreter, or None where the headers are not installed."""
    import sysconfig

    folder = sysconfig.get_paths().get("include")
    return folder if folder and os.path.isfile(os.path.join(folder, "Python.h")) else None


@contextlib.contextmanager
def _built(stem: str, source: Path, attempts: Sequence[Sequence[Step]], key: Sequence[str], suffix: str) -> Iterator[Path]:
    """The built file for `source` in the cache folder (built now if missing), keyed by everything it depends on."""
    cc = compiler()
    if cc is None:
        raise RuntimeError("no C compiler (set CC)")
    digest = zlib.crc32(source.read_bytes())
    for part in (" ".join(cc), os.uname().machine if hasattr(os, "uname") else os.name, repr([list(map(list, a)) for a in attempts]), *key):
        digest = zlib.crc32(part.encode("utf-8", "surrogateescape"), digest)
    folder = user_cache_dir("native")
    scratch = None
    if folder is not None:
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError:
            folder = None
    if folder is None:
        import tempfile

        scratch = tempfile.mkdtemp(prefix="accelport-native-")
        folder = Path(scratch)
    path = folder / f"{stem}-{digest:08x}{suffix}"
    try:
        if not path.exists():
            build_library(cc, source, path, attempts)
        yield path
    finally:
        if scratch is not None:
            import shutil

            shutil.rmtree(scratch, ignore_errors=True)  # a loaded library stays mapped


def build_library(cc: list[str], source: Path, path: Path, attempts: Sequence[Sequence[Step]]) -> None:
    """Run the first attempt whose steps all succeed, writing `path` by rename (never half-written)."""
    from accelport.fileio import atomic_path

    obj = path.with_name(f"{path.name}.{os.getpid()}.o")
    errors: list[str] = []
    try:
        for steps in attempts:
            with atomic_path(path) as tmp:  # renamed into place only when every step of the attempt succeeded
                names = {"{src}": str(source), "{obj}": str(obj), "{out}": str(tmp)}
                built = all(_run([*cc, *(names.get(word, word) for word in step)], cc[0], errors) for step in steps)
                if not built:
                    tmp.unlink(missing_ok=True)
            if built:
                log.debug("built %s (%s)", path, "; ".join(" ".join(step) for step in steps))
                return
    finally:
        with contextlib.suppress(OSError):
            obj.unlink()
    raise RuntimeError(f"{cc[0]} could not build {source.name}: {errors[-1] if errors else 'no build commands'}")


def _run(command: list[str], name: str, errors: list[str]) -> bool:
    import subprocess

    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeError(f"{name}: {exc}") from None
    if done.returncode != 0:
        errors.append((done.stderr.strip().splitlines() or ["failed"])[-1])
    return done.returncode == 0
