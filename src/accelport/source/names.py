"""What a name or a string in Python source means to accelport: a CUDA device string, a name that holds a
device or a backend, a torch CUDA API or a CUDA-only package (looked up in the knowledge files). Shared by
inventory's rules, migrate's codemods and run's redirect, so all three read a name the same way."""

from __future__ import annotations

import ast
import re

from accelport import knowledge

# The exact device strings accelport treats as CUDA devices.
DEVICE_RE = re.compile(r"cuda(:\d+)?")
# Names that hold a device (variables, attributes, parameters, dict keys).
DEVICE_NAME_RE = re.compile(r"(?i)(?:.*_)?(?:device|devices|dev|device_type|device_name|map_location|accelerator)")
BACKEND_NAME_RE = re.compile(r"(?i)(?:.*_)?(?:backend|dist_backend|ddp_backend|comm_backend)")
# torch.cuda submodules that re-export their public names at torch.cuda level.
_CUDA_SUBMODULES = ("memory", "random", "streams", "graphs", "__init__")


def is_device_string(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and DEVICE_RE.fullmatch(node.value) is not None


@knowledge.derived_cache
def _api_index() -> tuple[dict[str, dict], list[tuple[str, dict]]]:
    exact = {}
    prefixes = []
    for symbol, entry in knowledge.torch_api().items():
        exact[symbol] = entry
        if entry.get("prefix"):
            prefixes.append((symbol, entry))
    prefixes.sort(key=lambda kv: -len(kv[0]))
    return exact, prefixes


@knowledge.derived_cache
def lookup_api(qualname: str) -> tuple[str, dict] | None:
    """The catalogue entry for a qualified name: exact, through torch.cuda submodules, or by prefix."""
    exact, prefixes = _api_index()
    if qualname in exact:
        return qualname, exact[qualname]
    parts = qualname.split(".")
    if len(parts) > 3 and parts[:2] == ["torch", "cuda"] and parts[2] in _CUDA_SUBMODULES:
        short = ".".join(parts[:2] + parts[3:])
        if short in exact:
            return short, exact[short]
    for symbol, entry in prefixes:
        if qualname.startswith(symbol + "."):
            return symbol, entry
    return None


@knowledge.derived_cache
def _package_index() -> list[tuple[str, dict]]:
    return sorted(knowledge.packages().items(), key=lambda kv: -len(kv[0]))


@knowledge.derived_cache
def lookup_package(qualname: str) -> tuple[str, dict] | None:
    """The CUDA-only package a module path belongs to (longest module prefix)."""
    for module, entry in _package_index():
        if qualname == module or qualname.startswith(module + "."):
            return module, entry
    return None
