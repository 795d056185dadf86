"""Planning sweep: does every operator get a kernel config on every hardware profile at Llama-class sizes?

The shapes are those of Llama-7B/70B-class models: hidden 4096/8192, 32/64 query
heads with 8 KV heads (GQA), head_dim 128, sequences of 2048/4096 tokens,
vocabularies of 32000/128256, MLP widths 11008/28672, plus norms as narrow as
8 columns. The profiles are every entry of `knowledge/kernels/hardware.toml`
and the generic profiles a Moore Threads (MUSA) or Cambricon (MLU) device gets,
since neither has a hardware entry. Vendor overrides are planned with their own
config space on their own vendor. A triple that gets no config must be listed in
`REFUSALS` with the limit that rules it out; `accelport kernels plan` prints the sweep.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from accelport.kernels import configs, hardware, registry

TOKENS = 4096  # batch x sequence of one training step (2 x 2048 or 1 x 4096)
DTYPES = ("bfloat16", "float16", "float32")

# Generic profiles of vendors with no hardware entry, as `hardware.detect` builds them for a device it cannot match.
GENERIC_DEVICES = {"musa": "MTT S4000", "mlu": "Cambricon MLU370"}


def llama_problems() -> dict[str, list[dict[str, Any]]]:
    """Per config space (an operator, or `<op>_<vendor>`), the problem sizes a Llama-class step launches."""
    hidden, vocab, mlp = (4096, 8192), (32000, 128256), (11008, 28672)
    narrow = (8, 16, 32)  # the ≤16 (≤32 on AMD) columns that once got no config anywhere
    gemm = [(h, h) for h in hidden] + [(m, h) for h, m in zip(hidden, mlp, strict=True)]
    gemm += [(h, m) for h, m in zip(hidden, mlp, strict=True)] + [(v, h) for h in hidden for v in vocab] + [(1024, 8192)]
    attention = [
        {"B": TOKENS // s, "H": h, "Sq": s, "Sk": s, "D": 128, "causal": c} for h in (32, 64) for s in (2048, 4096) for c in (False, True)
    ]
    rows = {
        "softmax": [{"rows": TOKENS, "cols": c} for c in (2048, 4096, *vocab, *narrow)],
        "rms_norm": [{"rows": TOKENS, "cols": c} for c in (*hidden, *narrow)],
        "layer_norm": [{"rows": TOKENS, "cols": c} for c in (*hidden, *narrow)],
        "add_rms_norm": [{"rows": TOKENS, "cols": c} for c in (*hidden, *narrow)],
        "cross_entropy": [{"rows": TOKENS, "cols": c} for c in vocab],
        "swiglu": [{"n": TOKENS * m} for m in mlp],
        "geglu": [{"n": TOKENS * m} for m in mlp],
        "rope": [{"heads": h, "head_dim": 128, "tokens": TOKENS} for h in (8, 32, 64)],
        "gemm": [{"M": TOKENS, "N": n, "K": k} for n, k in gemm] + [{"M": k, "N": n, "K": TOKENS} for n, k in gemm[:4]],
        "linear": [{"M": TOKENS, "N": n, "K": k} for n, k in gemm],
        "bmm": [{"M": s, "N": s, "K": 128} for s in (2048, 4096)] + [{"M": s, "N": 128, "K": s} for s in (2048, 4096)],
        "fused_linear_cross_entropy": [{"M": min(TOKENS, (1 << 26) // v), "N": v, "K": h} for h in hidden for v in vocab],
        "flash_attention": attention,
        "block_sparse_attention": [{"block": b, "D": 128} for b in (64, 128)],
    }
    rows["log_softmax"] = rows["softmax"]
    rows["softmax_npu"] = rows["softmax"]
    rows["rms_norm_npu"] = rows["rms_norm"]
    return rows


def sweep_profiles() -> dict[str, hardware.HardwareProfile]:
    found = dict(hardware.profiles())
    for vendor, name in GENERIC_DEVICES.items():
        generic = hardware.generic(vendor, name)
        found[generic.key] = generic
    return found


# (config space, profile key, problem predicate's label) -> the limit that rules it out. None are needed today;
# an entry must name the limit (on-chip bytes, tile rule) so that `kernels plan` and the docs can say it.
REFUSALS: Mapping[tuple[str, str, str], str] = {}


@dataclass(frozen=True)
class PlanRow:
    space: str
    profile: str
    problem: Mapping[str, Any]
    config: str | None  # the default config's label; None when nothing fits
    rejected: Mapping[str, int]
    refusal: str | None = None  # the documented limit, for a triple in REFUSALS

    @property
    def planned(self) -> bool:
        return self.config is not None

    @property
    def label(self) -> str:
        return "-".join(f"{k}{v}" for k, v in self.problem.items() if k != "dtype") + f"-{self.problem['dtype']}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "space": self.space, "profile": self.profile, "problem": dict(self.problem), "config": self.config,
            "planned": self.planned, "refusal": self.refusal, "rejected": dict(self.rejected),
        }  # fmt: skip


def _spaces() -> dict[str, tuple[Any, str | None]]:
    """Config space name -> (space, the vendor it is for; None for the generic kernel's)."""
    spaces: dict[str, tuple[Any, str | None]] = {}
    for op in registry.operators():
        spaces[op.name] = (op.config_space, None)
        for vendor, target in op.overrides.items():
            module = importlib.import_module(target.partition(":")[0])
            spaces[f"{op.name}_{vendor}"] = (module.SPACE, vendor)
    return spaces


def sweep(
    profiles: Mapping[str, hardware.HardwareProfile] | None = None,
    problems: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    dtypes: Sequence[str] = DTYPES,
) -> Iterator[PlanRow]:
    """Every (config space, profile, problem, dtype) with the generator's default config, or why none fits."""
    profiles = sweep_profiles() if profiles is None else profiles
    problems = llama_problems() if problems is None else problems
    for name, (space, vendor) in _spaces().items():
        for key, hw in profiles.items():
            if vendor is not None and hw.vendor != vendor:
                continue  # an override runs only on its vendor's devices
            for problem in problems.get(name, ()):
                for dtype in dtypes:
                    full = {**problem, "dtype": dtype}
                    pruned = configs.generate(space, full, hw)
                    row = PlanRow(name, key, full, pruned.configs[0].label if pruned.configs else None, pruned.rejected)
                    if not row.planned:
                        row = PlanRow(name, key, full, None, pruned.rejected, REFUSALS.get((name, key, row.label)))
                    yield row


def unplanned(rows: Sequence[PlanRow]) -> list[PlanRow]:
    """Rows with no config and no documented refusal: what the sweep test requires to be empty."""
    return [r for r in rows if not r.planned and r.refusal is None]
