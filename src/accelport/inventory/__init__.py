"""`accelport inventory`: what in a tree depends on CUDA, of which kind, how hard it is to move, and which route to take.

`scan(paths, ...)` walks the tree, runs one scanner per file kind (Python and
notebooks here; C/C++/CUDA, build files, manifests and binaries register the
same way in `scanners.py`) and returns a `findings.Report`.
"""

from accelport.inventory.engine import scan

__all__ = ["scan"]
