"""Loaded by every Python process `accelport run` starts (this folder is put first on PYTHONPATH).

It arranges for torch.cuda to be redirected once the program imports torch, then hands over
to any sitecustomize this one shadows, so the environment's own start-up code still runs.
"""

import contextlib
import importlib
import os
import sys


def _accelport_redirect() -> None:
    try:
        from accelport.runtime import redirect
    except ImportError:
        # The program runs under another interpreter than accelport's: use accelport's copy.
        sys.path.append(os.environ.get("ACCELPORT_RUN_PATH", ""))
        from accelport.runtime import redirect
    redirect.install_from_environment()


def _chain_to_shadowed() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    ours = sys.modules.get("sitecustomize")
    saved = list(sys.path)
    try:
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
        sys.modules.pop("sitecustomize", None)
        with contextlib.suppress(ImportError):
            importlib.import_module("sitecustomize")
    finally:
        sys.path[:] = saved
        if ours is not None:
            sys.modules["sitecustomize"] = ours


_accelport_redirect()
_chain_to_shadowed()
