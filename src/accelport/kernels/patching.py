"""Drop-in, module style: `patch(model)` swaps a model's norm, MLP and attention modules for kernel-backed ones.

    from accelport import kernels
    handle = kernels.patch(model)        # in place; as Liger-Kernel's apply_liger_kernel_to_llama
    print(handle.report())               # what was replaced, what was not, and why
    handle.undo()                        # or kernels.unpatch(model)

Matched by module type and shape, not by model family:

| module | matched when | replaced by |
|---|---|---|
| `nn.LayerNorm` | normalized over the last dimension only | LayerNorm kernel (weight, bias optional) |
| `nn.RMSNorm`, HF-style `*RMSNorm` | 1-D `weight` (or none) and `eps` / `variance_epsilon` | RMSNorm kernel |
| HF-style MLP | `gate_proj`, `up_proj`, `down_proj` linears and a SiLU (or tanh-GELU) activation | SwiGLU (GEGLU) kernel between the projections |
| HF-style attention | `q_proj`, `k_proj`, `v_proj`, `o_proj`, `head_dim`, `is_causal`; called with `position_embeddings=(cos, sin)` | RoPE kernel on q and k, flash attention (GQA, causal) |

Replacements keep the original parameters and submodules under the same names, so
`state_dict()` and an optimizer built before patching are unaffected. A patched
attention called with what its kernels do not cover (an attention mask, a KV cache,
no position embeddings) runs the original forward, and counts the fallback.
`*RotaryEmbedding` modules only compute cos/sin tables; they are reported, not
replaced: the rotation is fused into the patched attention. Backward: every kernel
used has one (attention: FlashAttention-2's dK/dV and dQ kernels).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from accelport.kernels import aten, registry
from accelport.kernels.registry import KernelError

log = logging.getLogger(__name__)

HANDLE_ATTRIBUTE = "_accelport_patch"


@dataclass(frozen=True)
class PatchEntry:
    """One module considered: its path, type, whether it was replaced, by what or why not."""

    path: str
    module_type: str
    replaced: bool
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "type": self.module_type, "replaced": self.replaced, "detail": self.detail}


@dataclass
class PatchHandle:
    """What `patch()` did to one model, and how to undo it."""

    model: nn.Module
    entries: list[PatchEntry]
    _swaps: list[tuple[nn.Module, str, nn.Module, nn.Module]] = field(default_factory=list)

    @property
    def replaced(self) -> list[PatchEntry]:
        return [e for e in self.entries if e.replaced]

    def kernel_modules(self) -> list[nn.Module]:
        return [new for _, _, _, new in self._swaps]

    def undo(self) -> None:
        """Put every original module back (the parameters were shared, so training since is kept)."""
        for parent, name, original, _ in reversed(self._swaps):
            setattr(parent, name, original)
        self._swaps.clear()
        if getattr(self.model, HANDLE_ATTRIBUTE, None) is self:
            delattr(self.model, HANDLE_ATTRIBUTE)

    def report(self) -> str:
        lines = [f"accelport patch: {len(self.replaced)} of {len(self.entries)} candidate modules replaced"]
        for e in self.entries:
            lines.append(f"  {'replaced' if e.replaced else 'kept    '} {e.path} ({e.module_type}): {e.detail}")
        for module in self.kernel_modules():
            if getattr(module, "fallbacks", None):
                lines.append(f"  fallbacks in {type(module).__name__}: {dict(module.fallbacks)}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"entries": [e.to_dict() for e in self.entries]}


# --------------------------------------------------------------------------- kernel-backed modules


class KernelRMSNorm(nn.Module):
    """RMSNorm through the kernel; `weight` is the replaced module's parameter (or None)."""

    def __init__(self, weight: nn.Parameter | None, eps: float, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.weight = weight
        self.eps = eps
        self._fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._fn(x, self.weight, self.eps)


class KernelLayerNorm(nn.Module):
    def __init__(self, weight: nn.Parameter | None, bias: nn.Parameter | None, eps: float, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.weight = weight
        self.bias = bias
        self.eps = eps
        self._fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._fn(x, self.weight, self.bias, self.eps)


class KernelSwiGLUMLP(nn.Module):
    """down_proj(glu(gate_proj(x), up_proj(x))) with the SwiGLU or GEGLU kernel, the replaced module's projections."""

    def __init__(self, original: nn.Module, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.gate_proj, self.up_proj, self.down_proj = original.gate_proj, original.up_proj, original.down_proj
        self._fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self._fn(self.gate_proj(x), self.up_proj(x)))


class KernelAttention(nn.Module):
    """HF-style causal self-attention: projections, RoPE kernel on q and k, flash attention with GQA, o_proj."""

    def __init__(self, original: nn.Module, rope: Callable[..., Any], attention: Callable[..., Any]) -> None:
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = original.q_proj, original.k_proj, original.v_proj, original.o_proj
        self.head_dim = int(original.head_dim)
        self.scaling = float(getattr(original, "scaling", self.head_dim**-0.5))
        self._rope, self._attention = rope, attention
        self._original_forward = original.forward  # a bound method, not a submodule: state_dict keys stay the same
        self.fallbacks: dict[str, int] = {}

    def _fallback(self, why: str, *args: Any, **kwargs: Any) -> Any:
        self.fallbacks[why] = self.fallbacks.get(why, 0) + 1
        return self._original_forward(*args, **kwargs)

    def forward(self, hidden_states: torch.Tensor, position_embeddings: Any = None, attention_mask: Any = None, **kwargs: Any) -> Any:
        call = (hidden_states, position_embeddings, attention_mask)
        if attention_mask is not None:
            return self._fallback("attention_mask", *call, **kwargs)
        if any(kwargs.get(name) is not None for name in ("past_key_value", "past_key_values")):
            return self._fallback("KV cache", *call, **kwargs)
        if position_embeddings is None:
            return self._fallback("no position_embeddings", *call, **kwargs)
        cos, sin = position_embeddings
        batch, seq, _ = hidden_states.shape
        q = self.q_proj(hidden_states).view(batch, seq, -1, self.head_dim)
        k = self.k_proj(hidden_states).view(batch, seq, -1, self.head_dim)
        v = self.v_proj(hidden_states).view(batch, seq, -1, self.head_dim)
        q, k = self._rope(q, cos, sin), self._rope(k, cos, sin)  # (batch, seq, heads, dim): the kernel's layout
        out = self._attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), True, self.scaling)
        return self.o_proj(out.transpose(1, 2).reshape(batch, seq, -1)), None


# --------------------------------------------------------------------------- matching


def _eps(module: nn.Module) -> float | None:
    for name in ("eps", "variance_epsilon"):
        value = getattr(module, name, None)
        if isinstance(value, (int, float)):
            return float(value)
    return None


def _glu_kind(module: nn.Module) -> str | None:
    """The fused GLU kernel for an MLP's activation: swiglu (SiLU), geglu (tanh-approximated GELU), or None."""
    act = getattr(module, "act_fn", None)
    if isinstance(act, nn.SiLU) or act is nn.functional.silu:
        return "swiglu"
    if isinstance(act, nn.GELU) and act.approximate == "tanh":
        return "geglu"
    if type(act).__name__ in ("PytorchGELUTanh", "GELUTanh"):  # transformers' gelu_pytorch_tanh
        return "geglu"
    hidden_act = getattr(getattr(module, "config", None), "hidden_act", None)
    if act is None or not isinstance(act, nn.Module):
        return {"silu": "swiglu", "swish": "swiglu", "gelu_pytorch_tanh": "geglu"}.get(hidden_act)
    return None


def _candidate(module: nn.Module) -> str | None:
    """Which kind of replaceable module this looks like, by type and attributes; None if none."""
    name = type(module).__name__
    if isinstance(module, nn.LayerNorm):
        return "layer_norm"
    if isinstance(module, nn.RMSNorm) or name.endswith("RMSNorm"):
        return "rms_norm"
    if all(isinstance(getattr(module, p, None), nn.Linear) for p in ("gate_proj", "up_proj", "down_proj")):
        return "mlp"
    if all(isinstance(getattr(module, p, None), nn.Linear) for p in ("q_proj", "k_proj", "v_proj", "o_proj")):
        return "attention"
    if name.endswith("RotaryEmbedding"):
        return "rotary"
    return None


def _replacement(kind: str, module: nn.Module, device_type: str) -> tuple[nn.Module | None, str]:
    """(the kernel-backed module, what it is) or (None, why not)."""

    def impl(op: str) -> tuple[str, Callable[..., Any]]:
        return aten.implementation(registry.get(op), device_type)

    if kind == "layer_norm":
        if len(module.normalized_shape) != 1:
            return None, f"normalized_shape {tuple(module.normalized_shape)}: the kernel normalizes the last dimension only"
        name, fn = impl("layer_norm")
        return KernelLayerNorm(module.weight, module.bias, module.eps, fn), f"layer_norm ({name})"
    if kind == "rms_norm":
        weight = getattr(module, "weight", None)
        eps = _eps(module)
        shape = getattr(module, "normalized_shape", None)
        if shape is not None and len(shape) != 1:
            return None, f"normalized_shape {tuple(shape)}: the kernel normalizes the last dimension only"
        if weight is not None and (not isinstance(weight, nn.Parameter) or weight.dim() != 1):
            return None, "weight is not a 1-d parameter"
        if eps is None and not isinstance(module, nn.RMSNorm):
            return None, "no eps or variance_epsilon attribute"
        name, fn = impl("rms_norm")
        if eps is None:  # nn.RMSNorm(eps=None): torch uses the dtype's machine epsilon
            return _DtypeEpsRMSNorm(weight, fn), f"rms_norm ({name}), eps from the input dtype"
        return KernelRMSNorm(weight, eps, fn), f"rms_norm ({name})"
    if kind == "mlp":
        glu = _glu_kind(module)
        if glu is None:
            act = type(getattr(module, "act_fn", None)).__name__
            return None, f"activation {act}: only SiLU (SwiGLU) and tanh GELU (GEGLU) have fused kernels"
        name, fn = impl(glu)
        return KernelSwiGLUMLP(module, fn), f"{glu} ({name}) between the projections"
    if kind == "attention":
        if not hasattr(module, "head_dim"):
            return None, "no head_dim attribute"
        if not getattr(module, "is_causal", False):
            return None, "not causal (is_causal is not True): only causal self-attention is patched"
        if getattr(module, "attention_dropout", 0.0) and module.training:
            return None, "attention dropout in training"
        rope_name, rope = impl("rope")
        attention_name, attention = impl("flash_attention")
        return KernelAttention(module, rope, attention), f"rope ({rope_name}) + flash_attention ({attention_name})"
    return None, "computes the cos/sin tables only; the rotation runs in the patched attention"


class _DtypeEpsRMSNorm(KernelRMSNorm):
    def __init__(self, weight: nn.Parameter | None, fn: Callable[..., Any]) -> None:
        super().__init__(weight, 0.0, fn)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._fn(x, self.weight, torch.finfo(x.dtype).eps)


def _device_type(model: nn.Module, device: Any) -> str:
    if device is not None:
        return torch.device(device).type
    for tensor in (*model.parameters(), *model.buffers()):
        return tensor.device.type
    return "cpu"


def patch(model: nn.Module, device: Any = None) -> PatchHandle:
    """Replace the model's matching modules in place (see the module docstring); returns the handle with the report.

    The kernels chosen are those for `device` (default: where the model's parameters are).
    Patching a patched model is a KernelError; undo it first.
    """
    if getattr(model, HANDLE_ATTRIBUTE, None) is not None:
        raise KernelError("patch: this model is already patched; call kernels.unpatch(model) first")
    device_type = _device_type(model, device)
    handle = PatchHandle(model, [])
    parents = {id(child): (parent, name) for parent in model.modules() for name, child in parent.named_children()}
    # Outer modules first, so that a replaced MLP or attention is not searched again.
    replaced_under: list[str] = []
    for path, module in list(model.named_modules()):
        if any(path.startswith(prefix + ".") for prefix in replaced_under):
            continue
        kind = _candidate(module)
        if kind is None:
            continue
        new, detail = _replacement(kind, module, device_type)
        module_type = type(module).__name__
        if new is None:
            handle.entries.append(PatchEntry(path or "<root>", module_type, False, detail))
            continue
        if id(module) not in parents:
            handle.entries.append(PatchEntry(path or "<root>", module_type, False, "the model itself: patch its children"))
            continue
        parent, name = parents[id(module)]
        new.train(module.training)
        setattr(parent, name, new)
        handle._swaps.append((parent, name, module, new))
        handle.entries.append(PatchEntry(path, module_type, True, detail))
        replaced_under.append(path)
    setattr(model, HANDLE_ATTRIBUTE, handle)
    log.info("%s", handle.report())
    return handle


def unpatch(model: nn.Module) -> None:
    """Undo `patch(model)`; a model that is not patched is left as it is."""
    handle = getattr(model, HANDLE_ATTRIBUTE, None)
    if handle is not None:
        handle.undo()
