"""The API catalogue names only what exists: every `torch.x.y` a rewrite writes is in this torch,
and every `accelport.compat.X` it mentions (in any field, notes too) is a helper compat exports."""

from __future__ import annotations

import importlib
import re

import torch

import accelport.compat as compat
from accelport import knowledge

_PATH = re.compile(r"(?<![\w.])(accelport\.compat|torch)((?:\.[A-Za-z_]\w*)+)")
# Fields whose text migrate writes into code (notes may name vendor modules such as torch.npu).
_CODE_FIELDS = ("replacement", "fallback", "fallback_call")


def _resolves(root: object, dotted: str) -> bool:
    target = root
    for part in dotted.strip(".").split("."):
        if hasattr(target, part):
            target = getattr(target, part)
            continue
        try:
            target = importlib.import_module(f"{target.__name__}.{part}")
        except (AttributeError, ImportError):
            return False
    return True


def test_compat_helpers_named_anywhere_in_the_catalogue_exist():
    missing = []
    for symbol, entry in knowledge.torch_api().items():
        for field, text in entry.items():
            if not isinstance(text, str):
                continue
            for match in _PATH.finditer(text):
                if match.group(1) == "accelport.compat" and not _resolves(compat, match.group(2)):
                    missing.append((symbol, field, match.group(0)))
    assert missing == []


def test_torch_paths_that_rewrites_write_exist_in_this_torch():
    missing = []
    for symbol, entry in knowledge.torch_api().items():
        for field in _CODE_FIELDS:
            for match in _PATH.finditer(entry.get(field) or ""):
                root = compat if match.group(1) == "accelport.compat" else torch
                if not _resolves(root, match.group(2)):
                    missing.append((symbol, field, match.group(0)))
    assert missing == []


def test_compat_helpers_in_the_rules_and_marker_texts_exist():
    texts = [value for rule in knowledge.rules().values() for value in (rule.summary, rule.why, rule.before, rule.after, rule.fix)
             if isinstance(value, str)]
    texts += [str(value) for value in knowledge.read_toml("migrate.toml")["marker"].values()]
    missing = {m.group(0) for text in texts for m in _PATH.finditer(text)
               if m.group(1) == "accelport.compat" and not _resolves(compat, m.group(2))}
    assert missing == set()
