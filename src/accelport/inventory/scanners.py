"""The registry of file scanners. Adding a language or file kind is adding one line here.

Each line names the scanner's class and repeats which files it claims, so that finding
files imports no scanner: a Python-only tree never loads the C++, build-file, manifest
or binary scanners (and their tables). tests/inventory/test_scanners.py checks that each
line matches its class.
"""

from __future__ import annotations

import importlib
from functools import cache

from accelport.inventory.base import FileScanner, claims
from accelport.source.walk import kind_of

# (module, class, suffixes, exact file names, file-name regexes), in the order scanners
# claim files: the first claim wins.
_DECLARED: tuple[tuple[str, str, tuple[str, ...], tuple[str, ...], tuple[str, ...]], ...] = (
    # setup.py: the Python scanner's findings plus nvcc flags and arch lists
    ("accelport.inventory.buildfiles", "SetupScriptScanner", (), ("setup.py",), ()),
    ("accelport.inventory.python", "PythonScanner", (".py", ".pyi", ".pyw"), (), ()),
    ("accelport.inventory.python", "NotebookScanner", (".ipynb",), (), ()),
    (
        "accelport.inventory.cxx",
        "CxxScanner",
        (".cu", ".cuh", ".c", ".cc", ".cpp", ".cxx", ".c++", ".h", ".hh", ".hpp", ".hxx", ".inl", ".ipp", ".tcc", ".cu.inc"),
        (),
        (),
    ),
    (
        "accelport.inventory.buildfiles",
        "BuildFileScanner",
        (".cmake", ".mk", ".mak", ".dockerfile"),
        ("CMakeLists.txt", "Makefile", "makefile", "GNUmakefile", "Dockerfile", "Containerfile"),
        (r"(?:Dockerfile|Containerfile)[.-][\w.-]+", r"Makefile[.-][\w.-]+"),
    ),
    (
        "accelport.inventory.manifests",
        "ManifestScanner",
        (),
        ("pyproject.toml", "setup.cfg", "Pipfile"),
        (
            r"(?i)requirements.*\.(?:txt|in)",
            r"(?i)constraints.*\.txt",
            r"(?i)(?:conda[-_.]?)?env(?:ironment)?(?:[-_.][\w.-]+)?\.ya?ml",
        ),
    ),
    ("accelport.inventory.binary", "BinaryScanner", (".so", ".o", ".cubin", ".fatbin", ".whl", ".node"), (), (r".+\.so(?:\.\d+)+",)),
)  # fmt: skip


class DeclaredScanner:
    """A scanner known by the files it claims; its module is imported at first real use."""

    def __init__(self, module: str, cls: str, suffixes: tuple[str, ...], filenames: tuple[str, ...], patterns: tuple[str, ...]) -> None:
        self.module = module
        self.cls = cls
        self.suffixes = suffixes
        self.filenames = filenames
        self.filename_patterns = patterns
        self._instance: FileScanner | None = None

    def claims(self, filename: str) -> bool:
        return claims(filename, self.suffixes, self.filenames, self.filename_patterns)

    def load(self) -> FileScanner:
        if self._instance is None:
            self._instance = getattr(importlib.import_module(self.module), self.cls)()
        return self._instance

    def __repr__(self) -> str:
        return f"<scanner {self.module}.{self.cls}>"


@cache
def all_scanners() -> tuple[DeclaredScanner, ...]:
    """Every scanner, in the order they claim files (first claim wins)."""
    return tuple(DeclaredScanner(*line) for line in _DECLARED)


def scanner_for(filename: str) -> DeclaredScanner | None:
    """The scanner that claims `filename`, by the walk's own first-claim-wins rule."""
    index = kind_of(all_scanners(), filename)
    return None if index is None else all_scanners()[index]


def load_scanners(indexes: set[int]) -> None:
    """Import the scanners with these indexes now (before worker processes are forked)."""
    scanners = all_scanners()
    for index in sorted(indexes):
        scanners[index].load()
