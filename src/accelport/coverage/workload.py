"""What `accelport ops` traces: a model with example inputs, or a whole step function, from MODULE:FACTORY."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accelport.errors import UserError


@dataclass
class Workload:
    """One step to trace.

    `model(*inputs)` (or `model(**inputs)` for a dict) is the forward pass. In train mode
    `loss(output, targets)` (`loss(output)` without targets) gives the scalar to back-propagate
    (default: the output itself when it is a scalar, its `.loss` attribute when it has one, else
    `output.float().mean()`), and
    `optimizer(params)` builds the optimizer (default AdamW with foreach=True). A `step`
    callable replaces all of that: it runs one whole step itself.
    """

    model: Any = None
    inputs: Any = ()
    loss: Callable[..., Any] | None = None
    targets: Any = None  # moved to the tracing device with the inputs; keep tensors here, not in `loss`
    optimizer: Callable[[Iterable[Any]], Any] | None = None
    step: Callable[[], Any] | None = None


def as_workload(value: Any, origin: str) -> Workload:
    """Accept a Workload, (model, inputs), (model, inputs, loss), (model, inputs, loss, targets) or a step callable."""
    import torch

    if isinstance(value, Workload):
        workload = value
    elif isinstance(value, tuple) and 2 <= len(value) <= 4 and isinstance(value[0], torch.nn.Module):
        workload = Workload(*value[:3], targets=value[3] if len(value) == 4 else None)
    elif isinstance(value, torch.nn.Module):
        raise UserError(f"{origin}: the factory returned a model without inputs; return (model, inputs) or a Workload")
    elif callable(value):
        workload = Workload(step=value)
    else:
        raise UserError(
            f"{origin}: the factory returned {type(value).__name__}; return (model, inputs), "
            "(model, inputs, loss_fn), an accelport.coverage.Workload or a step function"
        )
    if workload.step is None and not isinstance(workload.model, torch.nn.Module):
        raise UserError(f"{origin}: Workload.model must be a torch.nn.Module (or give Workload.step)")
    return workload


def _import_file(path: Path) -> Any:
    name = f"accelport_factory_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UserError(f"{path}: cannot import this file; give a .py file or a dotted module")
    module = importlib.util.module_from_spec(spec)
    # Sibling imports (`from model import TinyLM`) work as they do when the file runs as a script.
    sys.path.insert(0, str(path.resolve().parent))
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(name, None)
        raise UserError(f"{path}: importing it failed ({type(exc).__name__}: {exc}); fix the file or its imports") from None
    finally:
        sys.path.remove(str(path.resolve().parent))
    return module


def load_factory(spec: str) -> Callable[[], Any]:
    """`pkg.module:factory` or `path/to/file.py:factory` (the attribute may be dotted: `file.py:Cls.build`)."""
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr:
        raise UserError(f"{spec}: expected MODULE:FACTORY, for example examples/legacy_cuda_app/model.py:build_model")
    looks_like_file = target.endswith(".py") or "/" in target or "\\" in target
    if looks_like_file:
        path = Path(target)
        if not path.is_file():
            raise UserError(f"{target}: no such file; give an existing .py file or a dotted module name")
        module = _import_file(path)
    else:
        try:
            module = importlib.import_module(target)
        except ImportError as exc:
            raise UserError(f"{target}: cannot import module ({exc}); check the name and PYTHONPATH") from None
        except Exception as exc:
            raise UserError(f"{target}: importing it failed ({type(exc).__name__}: {exc})") from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise UserError(f"{spec}: {target} has no attribute {attr!r}; name a function that returns (model, inputs)")
        obj = getattr(obj, part)
    if not callable(obj):
        raise UserError(f"{spec}: {attr} is not callable; name a function that returns (model, inputs)")
    try:
        required = [
            p
            for p in inspect.signature(obj).parameters.values()
            if p.default is inspect.Parameter.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        required = []
    if required:
        raise UserError(f"{spec}: the factory needs arguments ({', '.join(p.name for p in required)}); give one that takes none")
    return obj
