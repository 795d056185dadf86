"""The configuration generator: candidate tiles, warps and stages that fit a device, and tuned tables as data.

Each operator declares a `ConfigSpace`: its axes (tile sizes), how many bytes of
on-chip memory a config needs per program, which configs are invalid for a
problem, and a heuristic order. `generate()` enumerates the space for a problem
on a hardware profile and prunes what does not fit (the on-chip memory plan:
shared memory, LDS or unified buffer), what exceeds the threads per block, and
what the op rules out (a dot with K below the matrix unit). The first survivor
is the default; the rest are what `accelport kernels tune` times.

Tuned results are JSON files keyed by device and shape bucket: shipped ones in
`knowledge/kernels/tuned/`, and the user's in `ACCELPORT_KERNEL_TUNED`
(files or folders, separated by the path separator). `choose()` consults them
first, and falls back to the generator's default.
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import json
import logging
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from accelport import knowledge
from accelport.errors import UserError
from accelport.kernels.hardware import HardwareProfile

log = logging.getLogger(__name__)

TUNED_ENV = "ACCELPORT_KERNEL_TUNED"
TUNED_SCHEMA_VERSION = 1
Problem = Mapping[str, Any]


@dataclass(frozen=True, order=True)
class Config:
    """One kernel configuration: constexpr tile parameters plus warps and pipeline stages."""

    meta: tuple[tuple[str, int], ...]
    num_warps: int = 4
    num_stages: int = 1

    @classmethod
    def make(cls, meta: Mapping[str, int], num_warps: int = 4, num_stages: int = 1) -> Config:
        return cls(tuple(sorted((k, int(v)) for k, v in meta.items())), int(num_warps), int(num_stages))

    def __getitem__(self, name: str) -> int:
        return dict(self.meta)[name]

    def get(self, name: str, default: int | None = None) -> int | None:
        return dict(self.meta).get(name, default)

    def launch_options(self) -> dict[str, int]:
        """Keyword arguments for a launch: the constexprs, num_warps and num_stages."""
        return {**dict(self.meta), "num_warps": self.num_warps, "num_stages": self.num_stages}

    def to_dict(self) -> dict[str, int]:
        return {**dict(self.meta), "num_warps": self.num_warps, "num_stages": self.num_stages}

    @classmethod
    def from_dict(cls, data: Mapping[str, int]) -> Config:
        meta = {k: v for k, v in data.items() if k not in ("num_warps", "num_stages")}
        return cls.make(meta, data.get("num_warps", 4), data.get("num_stages", 1))

    @property
    def label(self) -> str:
        return " ".join([*(f"{k}={v}" for k, v in self.meta), f"w{self.num_warps}", f"s{self.num_stages}"])


@dataclass(frozen=True)
class ConfigSpace:
    """The tunable space of one operator's kernels."""

    axes: Mapping[str, Callable[[Problem, HardwareProfile], Sequence[int]]]
    onchip_bytes: Callable[[Config, Problem, HardwareProfile], int]  # per program
    bucket: Callable[[Problem], str]
    score: Callable[[Config, Problem, HardwareProfile], float]
    num_warps: Callable[[Problem, HardwareProfile], Sequence[int]] = lambda p, hw: (1, 2, 4, 8, 16)
    num_stages: Callable[[Problem, HardwareProfile], Sequence[int]] = lambda p, hw: (1,)
    reject: Callable[[Config, Problem, HardwareProfile], str | None] = lambda c, p, hw: None


@dataclass(frozen=True)
class Pruned:
    """The outcome of generating a space: the survivors in heuristic order, and why the others went."""

    configs: tuple[Config, ...]
    rejected: Mapping[str, int] = field(default_factory=dict)  # reason -> count


def generate(space: ConfigSpace, problem: Problem, hw: HardwareProfile) -> Pruned:
    """All configs of `space` that fit `hw` for `problem`, best-first by the space's heuristic."""
    names = sorted(space.axes)
    values = [tuple(space.axes[name](problem, hw)) for name in names]
    survivors: list[Config] = []
    rejected: dict[str, int] = {}
    limit = hw.onchip_bytes_per_block
    for combo in itertools.product(*values, space.num_warps(problem, hw), space.num_stages(problem, hw)):
        *tiles, warps, stages = combo
        config = Config.make(dict(zip(names, tiles, strict=True)), warps, stages)
        reason = space.reject(config, problem, hw)
        if reason is None and hw.warp_size and warps * hw.warp_size > hw.max_threads_per_block:
            reason = "more threads than a block may have"
        if reason is None and hw.warp_size == 0 and (warps, stages) != (1, 1):
            reason = "no warps or stages where the grid binds to physical cores"
        if reason is None and limit and space.onchip_bytes(config, problem, hw) > limit:
            reason = f"needs more {hw.onchip_kind} than the {limit} bytes per block"
        if reason is None:
            survivors.append(config)
        else:
            rejected[reason] = rejected.get(reason, 0) + 1
    survivors.sort(key=lambda c: (space.score(c, problem, hw), c))
    return Pruned(tuple(survivors), rejected)


# --------------------------------------------------------------------------- choosing


_pinned: contextvars.ContextVar[Mapping[str, Config] | None] = contextvars.ContextVar("accelport_pinned", default=None)
_target: contextvars.ContextVar[HardwareProfile | None] = contextvars.ContextVar("accelport_target", default=None)


@contextlib.contextmanager
def pinned(configs: Mapping[str, Config]) -> Iterator[None]:
    """Use these configs (keyed by operator name) for every launch inside the block."""
    token = _pinned.set(configs)
    try:
        yield
    finally:
        _pinned.reset(token)


def pinned_config(name: str) -> Config | None:
    """The config a caller pinned for `name`, if any (for launches that have fixed tiles rather than a space)."""
    pins = _pinned.get()
    return pins.get(name) if pins else None


@contextlib.contextmanager
def targeting(hw: HardwareProfile) -> Iterator[None]:
    """Choose configs as on `hw` inside the block (the AOT check builds for devices it does not have)."""
    token = _target.set(hw)
    try:
        yield
    finally:
        _target.reset(token)


def profile_for(device: Any, stand_in: str = "h100-sxm") -> HardwareProfile:
    """The hardware profile whose limits apply to a launch on `device`.

    An AOT build uses its target's profile. The Triton interpreter on CPU uses
    `stand_in` (the sm_90 reference device, or the device a vendor override is
    written for), so CPU validation runs the tile shapes that device would.
    """
    from accelport.kernels import hardware

    target = _target.get()
    if target is not None:
        return target
    found = hardware.detect(device)
    return found if found is not None else hardware.profile(stand_in)


def device_key(device: Any) -> str:
    """The key tuned tables are filed under: the hardware profile's key, or the device name made a slug."""
    import torch

    from accelport.kernels import hardware

    target = _target.get()
    if target is not None:
        return target.key
    device = torch.device(device)
    if device.type == "cpu":
        return "cpu"
    found = hardware.detect(device)
    return found.key if found is not None else hardware.slug(hardware.device_name(device))


def choose(name: str, space: ConfigSpace, problem: Problem, device: Any, stand_in: str = "h100-sxm") -> Config:
    """The config for one launch of config space `name` (an operator, or `<op>_<vendor>`).

    Pinned if a caller pinned one, else tuned for this device and shape bucket,
    else the generator's default for the device's profile (see `profile_for`).
    """
    pins = _pinned.get()
    if pins and name in pins:
        return pins[name]
    tuned = lookup(device_key(device), name, str(problem.get("dtype", "")), space.bucket(problem))
    if tuned is not None:
        return tuned
    return default_config(name, space, problem, profile_for(device, stand_in))


_defaults: dict[tuple[str, str, tuple[tuple[str, Any], ...]], Config] = {}


def default_config(op: str, space: ConfigSpace, problem: Problem, hw: HardwareProfile) -> Config:
    """The generator's first choice for `problem` on `hw` (memoised: launches ask for it every call)."""
    key = (op, hw.key, tuple(sorted(problem.items())))
    if key not in _defaults:
        pruned = generate(space, problem, hw)
        if not pruned.configs:
            raise UserError(f"{op}: no kernel config fits {hw.name} for {dict(problem)} (rejected: {dict(pruned.rejected)})")
        _defaults[key] = pruned.configs[0]
    return _defaults[key]


# --------------------------------------------------------------------------- tuned tables


@dataclass(frozen=True)
class TunedEntry:
    device: str
    op: str
    dtype: str
    bucket: str
    config: Config
    ms: float | None
    origin: str

    def to_dict(self) -> dict[str, Any]:
        return {"op": self.op, "dtype": self.dtype, "bucket": self.bucket, "config": self.config.to_dict(), "ms": self.ms}


def _tuned_paths() -> list[Path]:
    paths: list[Path] = []
    for entry in (p for p in os.environ.get(TUNED_ENV, "").split(os.pathsep) if p):
        path = Path(entry)
        if path.is_dir():
            paths.extend(sorted(path.glob("*.json")))
        elif path.is_file():
            paths.append(path)
        else:
            raise UserError(f"{path}: tuned table not found; fix ${TUNED_ENV}")
    return paths


def read_table(text: str, origin: str) -> list[TunedEntry]:
    """Parse one tuned table; a malformed one is a UserError naming the file."""
    try:
        data = json.loads(text)
        if data.get("schema_version") != TUNED_SCHEMA_VERSION:
            raise ValueError(f"schema_version must be {TUNED_SCHEMA_VERSION}")
        device = data["device_key"]
        return [
            TunedEntry(device, e["op"], e["dtype"], e["bucket"], Config.from_dict(e["config"]), e.get("ms"), origin)
            for e in data["entries"]
        ]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        why = f"missing key {exc}" if isinstance(exc, KeyError) else str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UserError(f"{origin}: not a tuned table ({why}); regenerate it with `accelport kernels tune`") from None


def tuned_entries() -> list[TunedEntry]:
    """Every tuned entry: shipped tables first, then the user's (later entries win)."""
    entries: list[TunedEntry] = []
    for name in knowledge.data_files("kernels/tuned", ".json"):
        text = resources.files(knowledge.__name__).joinpath(name).read_text(encoding="utf-8")
        entries.extend(read_table(text, f"knowledge/{name}"))
    for path in _tuned_paths():
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise UserError(f"{path}: cannot read tuned table ({exc.strerror})") from None
        entries.extend(read_table(text, str(path)))
    return entries


def _index() -> dict[tuple[str, str, str, str], TunedEntry]:
    key = (tuple(os.environ.get(TUNED_ENV, "").split(os.pathsep)),)
    cached = _index_cache.get(key)
    if cached is None:
        cached = {(e.device, e.op, e.dtype, e.bucket): e for e in tuned_entries()}
        _index_cache.clear()
        _index_cache[key] = cached
    return cached


_index_cache: dict[tuple, dict[tuple[str, str, str, str], TunedEntry]] = {}


def clear_tuned_cache() -> None:
    _index_cache.clear()


def check_tuned_tables() -> int:
    """Read every tuned table now; a malformed or missing one is a UserError naming the file.

    Commands call this before running kernels: inside a launch the same error
    would be caught with the kernel's own failures and reported as a failed case
    (exit 1) instead of as bad input (exit 2). Returns the number of entries.
    """
    return len(_index())


def lookup(device: str, op: str, dtype: str, bucket: str) -> Config | None:
    entry = _index().get((device, op, dtype, bucket))
    return entry.config if entry else None


def table_json(device_key_: str, device_name: str, entries: Sequence[TunedEntry], provenance: Mapping[str, Any]) -> str:
    """A tuned table as JSON text: what `accelport kernels tune` writes and `choose()` reads."""
    data = {
        "schema_version": TUNED_SCHEMA_VERSION,
        "device_key": device_key_,
        "device": device_name,
        **provenance,
        "entries": [e.to_dict() for e in sorted(entries, key=lambda e: (e.op, e.dtype, e.bucket))],
    }
    return json.dumps(data, indent=2) + "\n"


# --------------------------------------------------------------------------- shared axes and buckets


def matrix_warps(p: Problem, hw: HardwareProfile) -> tuple[int, ...]:
    """Warps of a tile kernel (GEMM, attention); one where the grid binds to physical cores and warps do not exist."""
    return (1,) if hw.grid_is_physical else (4, 8)


def pipeline_buffers(stages: int, hw: HardwareProfile) -> int:
    """Shared-memory copies of a pipelined operand: one per stage on NVIDIA (cp.async/TMA ring);
    AMD's stream pipeliner keeps stages - 1 in LDS (measured with the AOT check: num_stages=2 holds one)."""
    return max(1, stages - 1) if hw.warp_size == 64 else stages


def pow2_range(low: int, high: int) -> tuple[int, ...]:
    values, v = [], low
    while v <= high:
        values.append(v)
        v *= 2
    return tuple(values)


def pow2_at_least(n: int) -> int:
    return 1 << max(int(n) - 1, 0).bit_length()


def bucket_pow2(**sizes: int) -> str:
    """A shape bucket: each size rounded up to a power of two, e.g. 'M4096-N4096-K4096'."""
    return "-".join(f"{name}{pow2_at_least(value)}" for name, value in sizes.items())


def row_space(
    elements_per_row: Callable[[Problem], int], *, buffers: int, max_block: int = 16384, looped: bool = True
) -> ConfigSpace:
    """The space of a row-wise kernel (softmax, norms, cross-entropy): one program per row, a BLOCK-wide tile.

    A row that fits one tile (BLOCK >= the row) is read once; a longer row loops
    over tiles if the kernel can (`looped`), else it must fit one tile of at most
    `max_block`. `buffers` counts the BLOCK-wide fp32 values live at once: the
    on-chip plan for a device whose grid binds to cores (Ascend's unified buffer);
    on GPUs they live in registers, so only the reduction scratch needs shared memory.
    """

    def blocks(p: Problem, hw: HardwareProfile) -> tuple[int, ...]:
        need = pow2_at_least(elements_per_row(p))
        if not looped:
            return (need,)
        return tuple(b for b in pow2_range(64, max_block) if b <= need) or (64,)

    def warps(p: Problem, hw: HardwareProfile) -> tuple[int, ...]:
        return (1,) if hw.warp_size == 0 else (1, 2, 4, 8, 16)

    def onchip(c: Config, p: Problem, hw: HardwareProfile) -> int:
        if hw.grid_is_physical:  # tiles live in the unified buffer, double-buffered
            return c["BLOCK"] * 4 * buffers * 2
        return 4 * 32 * c.num_warps  # cross-warp reduction scratch

    def reject(c: Config, p: Problem, hw: HardwareProfile) -> str | None:
        if c["BLOCK"] > max(max_block, 64):
            return f"a row longer than {max_block} elements does not fit one tile"
        if hw.warp_size:
            per_thread = c["BLOCK"] // (c.num_warps * hw.warp_size)
            if per_thread < 1 and c.num_warps > 1:  # one warp over a narrow row: Triton replicates the elements
                return "fewer elements than threads"
            if per_thread > 64:
                return "more than 64 elements per thread (register spills)"
        return None

    def score(c: Config, p: Problem, hw: HardwareProfile) -> float:
        n = elements_per_row(p)
        passes = -(-n // c["BLOCK"])
        per_thread = c["BLOCK"] // max(c.num_warps * (hw.warp_size or 1), 1)
        # Fewest passes over the row, then about 8 elements per thread (vector loads, few registers).
        return passes * 1000 + abs(per_thread.bit_length() - 4)

    return ConfigSpace(
        axes={"BLOCK": blocks},
        onchip_bytes=onchip,
        bucket=lambda p: bucket_pow2(N=elements_per_row(p)),
        score=score,
        num_warps=warps,
        reject=reject,
    )


def elementwise_space(buffers: int) -> ConfigSpace:
    """The space of an elementwise kernel over `n` elements: a BLOCK-wide tile per program."""

    def blocks(p: Problem, hw: HardwareProfile) -> tuple[int, ...]:
        return tuple(b for b in pow2_range(256, 8192) if b <= max(pow2_at_least(p["n"]), 256))

    def reject(c: Config, p: Problem, hw: HardwareProfile) -> str | None:
        if hw.warp_size and c["BLOCK"] // (c.num_warps * hw.warp_size) not in (4, 8, 16):
            return "not 4 to 16 elements per thread"
        return None

    def score(c: Config, p: Problem, hw: HardwareProfile) -> float:
        programs = -(-p["n"] // c["BLOCK"])
        # Enough programs to fill every core several times over, then the largest tile.
        starved = programs < 4 * max(hw.cores, 1)
        return (1 if starved else 0) * 1e9 - c["BLOCK"] - c.num_warps

    def onchip(c: Config, p: Problem, hw: HardwareProfile) -> int:
        return c["BLOCK"] * 4 * buffers * 2 if hw.grid_is_physical else 0

    return ConfigSpace(
        axes={"BLOCK": blocks},
        onchip_bytes=onchip,
        bucket=lambda p: bucket_pow2(n=p["n"]),
        score=score,
        num_warps=lambda p, hw: (1,) if hw.warp_size == 0 else (1, 2, 4, 8),
        reject=reject,
    )
