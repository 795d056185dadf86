"""Started by `accelport dump -- COMMAND`: capture this Python process, then hand over to any other sitecustomize."""

import os

if os.environ.get("ACCELPORT_DUMP"):
    try:
        from accelport.verify.numerics.dump import start_from_environment

        start_from_environment()
    except Exception as exc:  # a broken dump must not stop the user's program silently or loudly
        import sys

        print(f"accelport dump: capture not started: {exc}", file=sys.stderr)


def _chain() -> None:
    """Run the sitecustomize this one shadows (a virtualenv's, a site's, `accelport run`'s)."""
    import importlib.machinery
    import importlib.util
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["_accelport_shadowed_sitecustomize"] = module
    spec.loader.exec_module(module)


_chain()
