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
    """Import every rule module so it registers itself."""
    from accelport.inventory.python.rules import (  # noqa: F401
        calls,
        comparisons,
        defaults,
        imports,
        strings,
        torch_api,
    )
