"""Generate accelport's per-backend operator lists from vendor YAML and torch's native_functions.yaml.

Inputs (read here, never by the package at run time):
  * the repository's copy of the reference data, `data/upstream/oplists/` (torch_npu 2.13.0 wheel YAML,
    torch_musa and torch_mlu codegen YAML, each with its LICENSE);
  * `torchgen/packaged/ATen/native/native_functions.yaml` inside the installed torch wheel
    (CUDA, MPS, XPU and CPU dispatch entries, structured delegates), plus the installed torch's
    dispatcher for which operators have composite kernels.

Outputs `src/accelport/knowledge/oplists/*.json`, each recording vendor, versions, source,
licence, input checksums and this script. Run with the torch version the lists are for:

    .venv/bin/python scripts/build_oplists.py [--data data/upstream/oplists]
    .venv/bin/python scripts/build_oplists.py --data ... --check   # exit 1 if the files are stale
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "src" / "accelport" / "knowledge" / "oplists"
GENERATOR = "scripts/build_oplists.py"

# Versions of the vendor inputs, as recorded in shared/data/README.md beside the files.
MUSA_COMMIT = "8b583b3f2fd0d9d3d9e74b9ec588a25d8bed1a30"
MLU_COMMIT = "d578002c0863bfa1ad30fae6b99e4fb3a79dff48"
UNKNOWN_TORCH = "unknown"  # said outright, so a report never shows a blank torch version
VENDOR_REPOS = {"musa": "MooreThreads/torch_musa", "mlu": "Cambricon/torch_mlu"}

# In-tree backends whose kernels native_functions.yaml lists under their dispatch key.
TORCH_BACKENDS = {
    "cuda": ("CUDA", True, "raises NotImplementedError (no CUDA kernel)"),
    "cpu": ("CPU", True, "raises NotImplementedError (no CPU kernel)"),
    "mps": (
        "MPS",
        True,
        "raises NotImplementedError, or runs on the CPU when PYTORCH_ENABLE_MPS_FALLBACK=1 "
        "(a few MPS kernels are registered by hand in C++, outside this list: confirm with --on-device)",
    ),
    # XPU kernels mostly live in intel/torch-xpu-ops, registered from its own YAML: torch's file
    # lists only the in-tree ones (matmul family, SDPA), so the list is partial.
    "xpu": (
        "XPU",
        False,
        "most XPU kernels come from intel/torch-xpu-ops, which this list does not cover; "
        "check on the machine with --on-device, or add that project's list with --oplist",
    ),
}

_COMPOSITE_KEYS = (
    ("CompositeImplicitAutograd", "implicit"),
    ("CompositeExplicitAutogradNonFunctional", "explicit_nonfunctional"),
    ("CompositeExplicitAutograd", "explicit"),
)


@dataclass(frozen=True)
class Source:
    path: Path

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.path.read_bytes()).hexdigest()

    def load(self):
        return yaml.load(self.path.read_text(encoding="utf-8"), Loader=yaml.CSafeLoader if hasattr(yaml, "CSafeLoader") else yaml.SafeLoader)


def op_name(entry: object) -> str:
    """`add.Tensor`, from a bare entry or a `func:` schema; `.default` is dropped like torch does."""
    text = entry if isinstance(entry, str) else entry["func"]  # type: ignore[index]
    name = str(text).split("(")[0].strip()
    return name[: -len(".default")] if name.endswith(".default") else name


def _keys(dispatch: dict | None) -> set[str]:
    return {key.strip() for compound in (dispatch or {}) for key in compound.split(",")}


def npu_ops(codegen: dict, hand_written: dict) -> list[str]:
    """torch_npu: `supported`, `autograd`, `quant`, `symint` are aten ops; `custom` ops live in namespace npu."""
    ops: set[str] = set()
    for data in (codegen, hand_written):
        for section in ("supported", "autograd", "quant", "symint"):
            ops.update(op_name(e) for e in data.get(section) or [])
        ops.update(f"npu::{op_name(e)}" for e in data.get("custom") or [])
    return sorted(ops)


def musa_ops(entries: list) -> list[str]:
    """torch_musa: an entry without `dispatch` registers a dense PrivateUse1 kernel; with one, only the keys named."""
    ops = set()
    for entry in entries:
        keys = _keys(entry.get("dispatch"))
        if not keys or "PrivateUse1" in keys:
            ops.add(op_name(entry))
    return sorted(ops)


def mlu_ops(data: dict) -> list[str]:
    """torch_mlu: `aten` ops, plus torchvision and torchaudio ops (custom ops' namespace is not stated, so left out)."""
    ops = {op_name(e) for e in data.get("aten") or []}
    ops.update(f"torchvision::{op_name(e)}" for e in data.get("vision") or [])
    ops.update(f"torchaudio::{op_name(e)}" for e in data.get("audio") or [])
    return sorted(ops)


# `ufunc_inner_loop` entries get generated CPU and CUDA kernels (torchgen/dest/ufunc.py).
UFUNC_KEYS = {"CPU", "CUDA"}


def torch_backend_ops(native: list[dict], key: str) -> list[str]:
    """Operators with a kernel under `key`, plus structured functional/in-place variants whose `.out` has one
    (torchgen registers those wrappers under the same key)."""
    direct = {
        op_name(e) for e in native if key in _keys(e.get("dispatch")) or (e.get("ufunc_inner_loop") and key in UFUNC_KEYS)
    }
    wrapped = {op_name(e) for e in native if e.get("structured_delegate") in direct}
    return sorted(direct | wrapped)


def aten_facts(native: list[dict]) -> dict[str, list[str]]:
    """op -> [composite kind or "", structured delegate or ""], composites asked of the installed dispatcher."""
    import torch

    names: set[str] = set()
    delegates: dict[str, str] = {}
    for entry in native:
        name = op_name(entry)
        names.add(name)
        if entry.get("structured_delegate"):
            delegates[name] = entry["structured_delegate"]
        autogen = entry.get("autogen") or ""
        names.update(part.strip() for part in autogen.split(",") if part.strip())
    facts = {}
    for name in sorted(names):
        kind = ""
        try:
            for key, label in _COMPOSITE_KEYS:
                if torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{name}", key):
                    kind = label
                    break
        except RuntimeError:  # an `autogen` name this build does not register
            continue
        facts[name] = [kind, delegates.get(name, "")]
    return facts


def licence_line(path: Path) -> str:
    """The vendor's own copyright line of a LICENSE file (they all start from PyTorch's)."""
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip().startswith("Copyright") and "Facebook" not in line:
            return line.strip()
    return path.name


def document(header: dict, ops: Iterable[str] | dict) -> str:
    body = dict(header)
    body["ops"] = ops if isinstance(ops, dict) else sorted(ops)
    return json.dumps(body, indent=1, sort_keys=False) + "\n"


def build(data_dir: Path) -> dict[str, str]:
    """File name -> JSON text for every generated file."""
    import torch

    torch_version = torch.__version__.split("+")[0]
    native_path = Path(torch.__file__).resolve().parents[1] / "torchgen" / "packaged" / "ATen" / "native" / "native_functions.yaml"
    native_src = Source(native_path)
    native = native_src.load()
    common = {"schema_version": 1, "generated_by": GENERATOR}
    torch_source = f"torch {torch.__version__} wheel: torchgen/packaged/ATen/native/native_functions.yaml"
    files: dict[str, str] = {}

    files[f"aten-torch-{torch_version}.json"] = document(
        {
            **common,
            "torch_version": torch_version,
            "source": f"{torch_source}; composite kernels from the installed torch's dispatcher",
            "licence": "BSD-3-Clause (PyTorch)",
            "input_sha256": {"native_functions.yaml": native_src.sha256},
            "format": "op -> [composite kind: implicit | explicit | explicit_nonfunctional | '', structured delegate | '']",
        },
        aten_facts(native),
    )
    for vendor, (key, complete, unlisted) in TORCH_BACKENDS.items():
        files[f"{vendor}-torch-{torch_version}.json"] = document(
            {
                **common,
                "vendor": vendor,
                "backend": "torch",
                "version": torch_version,
                "torch_version": torch_version,
                "dispatch_key": key,
                "complete": complete,
                "unlisted": unlisted,
                "source": f"{torch_source}, entries dispatching to {key}",
                "licence": "BSD-3-Clause (PyTorch)",
                "input_sha256": {"native_functions.yaml": native_src.sha256},
            },
            torch_backend_ops(native, key),
        )

    npu_dir = data_dir / "torch_npu-2.13.0"
    codegen = Source(npu_dir / "npu_native_functions_by_codegen.yaml")
    hand = Source(npu_dir / "npu_native_functions.yaml")
    files["npu-torch_npu-2.13.0.json"] = document(
        {
            **common,
            "vendor": "npu",
            "backend": "torch_npu",
            "version": "2.13.0",
            "torch_version": "2.13.0",
            "dispatch_key": "PrivateUse1",
            "complete": True,
            "unlisted": (
                "raises, or falls back to the CPU silently (torch_npu's npu_cpu_fallback; "
                "TORCH_NPU_FALLBACK_CPU_DISABLE=1 turns the fallback off)"
            ),
            "source": (
                "torch-npu 2.13.0 wheel: torch_npu/csrc/aten/npu_native_functions_by_codegen.yaml "
                "(supported, autograd, quant, symint; custom as npu::) and npu_native_functions.yaml"
            ),
            "licence": f"BSD-style, torch_npu LICENSE: {licence_line(npu_dir / 'LICENSE')}",
            "input_sha256": {codegen.path.name: codegen.sha256, hand.path.name: hand.sha256},
        },
        npu_ops(codegen.load(), hand.load()),
    )

    # torch_musa and torch_mlu: codegen YAML from GitHub at a recorded commit; both are PrivateUse1 backends.
    for vendor, backend, commit, relative, what, licence, parse in (
        ("musa", "torch_musa", MUSA_COMMIT, "torch_musa/csrc/aten/ops/musa_functions.yaml", "dense PrivateUse1 entries", "BSD-3-Clause", musa_ops),
        ("mlu", "torch_mlu", MLU_COMMIT, "codegen/mlu_functions.yaml", "aten, vision, audio", "BSD-style", mlu_ops),
    ):
        source = Source(data_dir / backend / Path(relative).name)
        files[f"{vendor}-{backend}-{commit[:7]}.json"] = document(
            {
                **common,
                "vendor": vendor,
                "backend": backend,
                "version": commit[:7],
                # The codegen YAML at this commit does not say which torch it builds against.
                "torch_version": UNKNOWN_TORCH,
                "dispatch_key": "PrivateUse1",
                "complete": True,
                "unlisted": f"raises NotImplementedError, or runs {backend}'s CPU fallback where it registers one",
                "source": f"{VENDOR_REPOS[vendor]}@{commit}: {relative} ({what})",
                "licence": f"{licence}, {backend} LICENSE: {licence_line(source.path.parent / 'LICENSE')}",
                "input_sha256": {source.path.name: source.sha256},
            },
            parse(source.load()),
        )
    return files


def find_data(explicit: str | None) -> Path:
    candidates = [Path(explicit)] if explicit else [REPO / "data" / "upstream" / "oplists"]
    for candidate in candidates:
        if (candidate / "torch_npu-2.13.0").is_dir():
            return candidate
    sys.exit(f"build_oplists: no oplists data folder at {', '.join(map(str, candidates))}; pass --data DIR")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", help="the oplists data folder (default: data/upstream/oplists)")
    parser.add_argument("--out", default=str(OUT), help="where to write (default: %(default)s)")
    parser.add_argument("--check", action="store_true", help="compare with the files on disk; exit 1 if any differs")
    args = parser.parse_args(argv)
    files = build(find_data(args.data))
    out = Path(args.out)
    if args.check:
        stale = [name for name, text in files.items() if not (out / name).is_file() or (out / name).read_text(encoding="utf-8") != text]
        for name in stale:
            print(f"stale: {out / name}")
        return 1 if stale else 0
    sys.path.insert(0, str(REPO / "src"))
    from accelport.fileio import atomic_write_text

    for name, text in files.items():
        atomic_write_text(out / name, text)
        print(f"wrote {out / name} ({len(json.loads(text)['ops'])} ops)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
