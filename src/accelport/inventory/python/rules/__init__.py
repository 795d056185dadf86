"""Python rules, one module per API family, each registered for the AST node kinds it inspects.

The walk over a file is paid once, whatever the number of rules (pyupgrade's design).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Callable

REGISTRY: dict[type[ast.AST], list[Callable]] = defaultdict(list)
FINALIZERS: list[Callable] = []


def on(*node_types: type[ast.AST]) -> Callable:
    """Register a rule function `(ctx, node) -> None` for these node kinds."""

    def decorate(func: Callable) -> Callable:
        for node_type in node_types:
            REGISTRY[node_type].append(func)
        return func

    return decorate


def after_walk(func: Callable) -> Callable:
    """Register a function `(ctx) -> None` that runs once the whole file has been walked."""
    FINALIZERS.append(func)
    return func


def load() -> None:
    """Import every rule module of this package so it registers itself: a new file is picked up, none drops out."""
    import importlib
    import pkgutil

    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if not info.name.startswith("_"):
            importlib.import_module(f"{__name__}.{info.name}")
