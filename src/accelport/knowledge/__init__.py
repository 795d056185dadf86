"""Load accelport's knowledge files (vendor profiles, rules, API catalogues), merged with user files.

Knowledge is data: TOML/JSON shipped in this package, each fact with its source.
A user file (`--knowledge FILE` or `ACCELPORT_KNOWLEDGE=FILE[:FILE...]`) can add
or override vendors, torch API entries and package entries without touching code.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from accelport.errors import UserError
from accelport.fileio import user_cache_dir
from accelport.findings import Category, Effort, Route, Rule

ENV_VAR = "ACCELPORT_KNOWLEDGE"
_user_files: list[Path] = []


def set_user_files(paths: Iterable[str | os.PathLike[str]]) -> None:
    """Add site knowledge files (from `--knowledge`); later files win over earlier ones."""
    _user_files[:] = [Path(p) for p in paths]
    _clear_caches()


def user_files() -> list[Path]:
    env = [Path(p) for p in os.environ.get(ENV_VAR, "").split(os.pathsep) if p]
    return env + _user_files


_derived_caches: list = []


def derived_cache(func):
    """`functools.cache` for values computed from knowledge; cleared when the user files change."""
    cached = cache(func)
    _derived_caches.append(cached)
    return cached


def _clear_caches() -> None:
    for loader in (vendors, torch_api, packages, rules, _user_data, *_derived_caches):
        loader.cache_clear()


# The data files ship inside the package (wheels install them as plain files); a Path is
# cheaper to start than importlib.resources, which imports zipfile and tempfile.
_HERE = Path(__file__).resolve().parent


def read_toml(name: str) -> dict[str, Any]:
    """A TOML file shipped in this package, by path relative to `knowledge/`.

    Parsed data is cached (pickled, keyed by a hash of the text) in the user's cache
    folder: TOML parsing of the knowledge files was a fifth of a small command's run.
    The text is always read, so an edited file is never served stale.
    """
    raw = _HERE.joinpath(*name.split("/")).read_bytes()
    return _cached_parse(raw, name)


def toml_parser() -> Any:
    """The TOML parser, imported only when a file is not in the parse cache (or a user file is read)."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    return tomllib


def _cached_parse(raw: bytes, name: str) -> dict[str, Any]:
    folder = user_cache_dir("knowledge")
    # Keyed by length and CRC-32 of the text: hashlib (OpenSSL) costs more to import than this whole lookup.
    path = folder / f"{len(raw):x}-{zlib.crc32(raw):08x}.pickle" if folder else None
    if path is not None:
        try:
            with open(path, "rb") as handle:
                return pickle.load(handle)
        except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ValueError):
            pass
    data = toml_parser().loads(raw.decode("utf-8"))
    if path is not None:
        try:
            from accelport.fileio import atomic_open

            with atomic_open(path, "wb", encoding=None) as handle:
                pickle.dump(data, handle, protocol=pickle.HIGHEST_PROTOCOL)
        except OSError:
            pass  # a read-only home is fine: parse every time
    return data


def read_json(name: str) -> Any:
    return json.loads(_HERE.joinpath(*name.split("/")).read_text(encoding="utf-8"))


def data_files(folder: str, suffix: str = ".toml") -> list[str]:
    """Names (relative to `knowledge/`) of the data files in one folder, sorted."""
    return sorted(f"{folder}/{entry.name}" for entry in _HERE.joinpath(folder).iterdir() if entry.name.endswith(suffix))


@cache
def _user_data() -> tuple[tuple[Path, dict[str, Any]], ...]:
    loaded = []
    for path in user_files():
        from accelport.fileio import read_input_text

        text = read_input_text(path, "knowledge file", hint=f"check the path, given directly or in ${ENV_VAR}")
        try:
            loaded.append((path, toml_parser().loads(text)))
        except toml_parser().TOMLDecodeError as exc:
            raise UserError(f"{path}: not valid TOML ({exc}); fix the file or stop naming it as a knowledge file") from None
    return tuple(loaded)


def _deep_merge(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _deep_merge(dict(merged[key]), value)
        else:
            merged[key] = value
    return merged


# --------------------------------------------------------------------------- vendors


@dataclass(frozen=True, slots=True)
class OnChipMemory:
    kind: str
    bytes_per_core: int
    unit: str
    device: str
    source: str


@dataclass(frozen=True, slots=True)
class VendorProfile:
    """How one accelerator vendor appears to PyTorch, launchers and schedulers."""

    key: str
    name: str
    torch_device: str
    reuses_torch_cuda: bool
    adapter_package: str
    adapter_import: str
    distributed_backend: str
    collective_library: str
    visible_devices: tuple[str, ...]
    container_visible_devices: tuple[str, ...]
    k8s_resources: tuple[str, ...]
    k8s_node_labels: Mapping[str, str]
    slurm_gres: str
    monitoring_cli: str
    warp_size: int
    fp64: str
    profiler_activity: str
    onchip_memory: OnChipMemory | None
    sources: tuple[str, ...]
    notes: tuple[str, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def visible_devices_var(self) -> str | None:
        """The process-level variable that restricts visible devices, if the vendor has one."""
        return self.visible_devices[0] if self.visible_devices else None

    def to_dict(self) -> dict[str, Any]:
        data = {
            "key": self.key,
            "name": self.name,
            "torch_device": self.torch_device,
            "reuses_torch_cuda": self.reuses_torch_cuda,
            "adapter_package": self.adapter_package,
            "adapter_import": self.adapter_import,
            "distributed_backend": self.distributed_backend,
            "collective_library": self.collective_library,
            "visible_devices": list(self.visible_devices),
            "container_visible_devices": list(self.container_visible_devices),
            "k8s_resources": list(self.k8s_resources),
            "k8s_node_labels": dict(self.k8s_node_labels),
            "slurm_gres": self.slurm_gres,
            "monitoring_cli": self.monitoring_cli,
            "warp_size": self.warp_size,
            "fp64": self.fp64,
            "profiler_activity": self.profiler_activity,
            "onchip_memory": None,
            "sources": list(self.sources),
            "notes": list(self.notes),
        }
        if self.onchip_memory is not None:
            mem = self.onchip_memory
            data["onchip_memory"] = {
                "kind": mem.kind,
                "bytes_per_core": mem.bytes_per_core,
                "unit": mem.unit,
                "device": mem.device,
                "source": mem.source,
            }
        data.update(self.extra)
        return data


_VENDOR_FIELDS = {
    "name": str,
    "torch_device": str,
    "reuses_torch_cuda": bool,
    "adapter_package": str,
    "adapter_import": str,
    "distributed_backend": str,
    "collective_library": str,
    "visible_devices": list,
    "container_visible_devices": list,
    "k8s_resources": list,
    "k8s_node_labels": dict,
    "slurm_gres": str,
    "monitoring_cli": str,
    "warp_size": int,
    "fp64": str,
    "profiler_activity": str,
}


def _vendor_from_table(key: str, table: Mapping[str, Any], origin: str) -> VendorProfile:
    for name, kind in _VENDOR_FIELDS.items():
        if name not in table:
            raise UserError(f"{origin}: vendor.{key} lacks `{name}`; add it (see `accelport backends cuda` for a full profile)")
        if not isinstance(table[name], kind):
            raise UserError(f"{origin}: vendor.{key}.{name} must be a {kind.__name__}, got {table[name]!r}")
    mem = table.get("onchip_memory")
    onchip = None
    if mem:
        try:
            onchip = OnChipMemory(
                kind=mem["kind"],
                bytes_per_core=int(mem["bytes_per_core"]),
                unit=mem.get("unit", "core"),
                device=mem.get("device", ""),
                source=mem.get("source", ""),
            )
        except (KeyError, TypeError, ValueError):
            raise UserError(f"{origin}: vendor.{key}.onchip_memory needs `kind` and an integer `bytes_per_core`") from None
    known = set(_VENDOR_FIELDS) | {"onchip_memory", "sources", "notes"}
    return VendorProfile(
        key=key,
        name=table["name"],
        torch_device=table["torch_device"],
        reuses_torch_cuda=table["reuses_torch_cuda"],
        adapter_package=table["adapter_package"],
        adapter_import=table["adapter_import"],
        distributed_backend=table["distributed_backend"],
        collective_library=table["collective_library"],
        visible_devices=tuple(table["visible_devices"]),
        container_visible_devices=tuple(table["container_visible_devices"]),
        k8s_resources=tuple(table["k8s_resources"]),
        k8s_node_labels=dict(table["k8s_node_labels"]),
        slurm_gres=table["slurm_gres"],
        monitoring_cli=table["monitoring_cli"],
        warp_size=table["warp_size"],
        fp64=table["fp64"],
        profiler_activity=table["profiler_activity"],
        onchip_memory=onchip,
        sources=tuple(table.get("sources", ())),
        notes=tuple(table.get("notes", ())),
        extra={k: v for k, v in table.items() if k not in known},
    )


@cache
def vendors() -> dict[str, VendorProfile]:
    """Every vendor profile, keyed by vendor key (cuda, rocm, npu, xpu, ...), user files applied."""
    tables: dict[str, dict[str, Any]] = dict(read_toml("vendors.toml")["vendor"])
    origins = {key: "knowledge/vendors.toml" for key in tables}
    for path, data in _user_data():
        for key, table in data.get("vendor", {}).items():
            tables[key] = _deep_merge(tables.get(key, {}), table)
            origins[key] = str(path)
    return {key: _vendor_from_table(key, table, origins[key]) for key, table in tables.items()}


def vendor(key: str) -> VendorProfile:
    """One vendor profile; an unknown key is a user error that lists the known ones."""
    profiles = vendors()
    if key not in profiles:
        raise UserError(f"unknown vendor {key!r}; known vendors: {', '.join(sorted(profiles))}")
    return profiles[key]


def vendor_for_device(device_type: str) -> VendorProfile | None:
    """The profile whose torch device type is `device_type` (the first listed, for `cuda`)."""
    for profile in vendors().values():
        if profile.torch_device == device_type:
            return profile
    return None


# --------------------------------------------------------------------------- rules


def _rule_from_table(table: Mapping[str, Any], origin: str) -> Rule:
    try:
        rule_id = table["id"]
        category = Category(table["category"])
        if len(rule_id) != 6 or not rule_id.startswith("AP") or not rule_id[2:].isdigit():
            raise ValueError(f"rule id {rule_id!r} is not AP + 4 digits")
        if int(rule_id[2]) != category.digit:
            raise ValueError(f"{rule_id}: first digit must be {category.digit} for category {category.value}")
        return Rule(
            id=rule_id,
            name=table["name"],
            category=category,
            family=table["family"],
            summary=table["summary"],
            why=table["why"],
            before=table.get("before", ""),
            after=table.get("after", ""),
            effort=Effort(table["effort"]),
            autofix=bool(table.get("autofix", False)),
            route=Route(table.get("route", "A")),
            sources=tuple(table.get("sources", ())),
            fix=table.get("fix", ""),
        )
    except (KeyError, ValueError) as exc:
        raise UserError(f"{origin}: invalid rule {table.get('id', '?')}: {exc}") from None


@cache
def rules() -> dict[str, Rule]:
    """Every rule, keyed by ID, from knowledge/rules/*.toml."""
    found: dict[str, Rule] = {}
    for name in data_files("rules"):
        for table in read_toml(name).get("rule", []):
            rule = _rule_from_table(table, f"knowledge/{name}")
            if rule.id in found:
                raise RuntimeError(f"knowledge/{name}: duplicate rule id {rule.id}")
            found[rule.id] = rule
    return dict(sorted(found.items()))


def rule_prefixes(text: str | Iterable[str] | None, option: str) -> tuple[str, ...]:
    """`AP1101,AP12` (or several such) -> ('AP1101', 'AP12'); each must be a rule ID or the
    prefix of one, else a UserError naming `option` (--select, --ignore, a pyproject key)."""
    if not text:
        return ()
    parts = text.split(",") if isinstance(text, str) else [p for item in text for p in str(item).split(",")]
    all_rules = rules()
    out = []
    for part in (p.strip().upper() for p in parts):
        if not part:
            continue
        if not re.fullmatch(r"AP\d{1,4}", part) or not any(r.startswith(part) for r in all_rules):
            raise UserError(f"{option} {part}: not a rule ID or ID prefix; `accelport rules` lists them")
        out.append(part)
    return tuple(out)


def rule(rule_id: str) -> Rule:
    all_rules = rules()
    if rule_id.upper() not in all_rules:
        raise UserError(f"unknown rule {rule_id!r}; `accelport rules` lists them all")
    return all_rules[rule_id.upper()]


# --------------------------------------------------------------------------- catalogues


def _merged_entries(name: str, table_key: str, key_field: str) -> dict[str, dict[str, Any]]:
    entries = {entry[key_field]: entry for entry in read_toml(name).get(table_key, [])}
    for path, data in _user_data():
        for entry in data.get(table_key, []):
            if key_field not in entry:
                raise UserError(f"{path}: every [[{table_key}]] entry needs `{key_field}`")
            entries[entry[key_field]] = _deep_merge(entries.get(entry[key_field], {}), entry)
    return entries


@cache
def torch_api() -> dict[str, dict[str, Any]]:
    """The CUDA-specific PyTorch API catalogue, keyed by qualified symbol."""
    return _merged_entries("torch_api.toml", "api", "symbol")


@cache
def packages() -> dict[str, dict[str, Any]]:
    """CUDA-only Python packages, keyed by import name."""
    return _merged_entries("packages.toml", "package", "module")
