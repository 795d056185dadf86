"""The registry of file scanners. Adding a language or file kind is adding one line here."""

from __future__ import annotations

from functools import cache

from accelport.inventory.base import FileScanner


@cache
def all_scanners() -> tuple[FileScanner, ...]:
    """One instance of every scanner, in the order they claim files (first claim wins)."""
    from accelport.inventory.binary import BinaryScanner
    from accelport.inventory.buildfiles import BuildFileScanner, SetupScriptScanner
    from accelport.inventory.cxx import CxxScanner
    from accelport.inventory.manifests import ManifestScanner
    from accelport.inventory.python import NotebookScanner, PythonScanner

    return (
        SetupScriptScanner(),  # setup.py: the Python scanner's findings plus nvcc flags and arch lists
        PythonScanner(),
        NotebookScanner(),
        CxxScanner(),
        BuildFileScanner(),
        ManifestScanner(),
        BinaryScanner(),
    )


def scanner_for(filename: str) -> FileScanner | None:
    for scanner in all_scanners():
        if scanner.claims(filename):
            return scanner
    return None
