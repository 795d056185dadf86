"""The vendor-neutral job and the pools it can run in, read from TOML with clear errors."""

from __future__ import annotations

import dataclasses
import re
import unicodedata
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from accelport import knowledge
from accelport.errors import ParameterHint, UserError
from accelport.fileio import read_input_text
from accelport.knowledge import VendorProfile

ENGINES = ("slurm", "kubernetes")
SCHEDULERS = ("default", "kueue", "volcano")
LAUNCHERS = ("torchrun", "none")
KUEUE_API_VERSIONS = ("v1beta1", "v1beta2")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_MEMORY = re.compile(r"^([1-9][0-9]*)(Ki|Mi|Gi|Ti)$")
_TIME = re.compile(r"^(?:(\d+)-)?(\d{1,2}):(\d{2}):(\d{2})$")
# C0 and C1 control characters and DEL: a newline or carriage return in a rendered value starts
# a new shell line (or #SBATCH directive), an ESC rewrites the terminal of whoever reads it.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# A Slurm GRES name or type: it goes into `name:type:count` and into the batch script's shell code.
_GRES_WORD = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
# Fields that are never rendered: where a spec came from, a vendor profile's provenance and notes.
_NOT_RENDERED = frozenset({"source", "sources", "notes", "extra", "onchip_memory"})


class PoolState(str, Enum):
    """Where a pool stands in the migration: what the router may send to it."""

    PRIMARY = "primary"  # takes its weighted share
    CANARY = "canary"  # takes its weighted share (the ramp)
    BACKUP = "backup"  # only when no primary or canary pool can take the job
    DRAIN = "drain"  # receives no new jobs; the ones running there finish
    DOWN = "down"  # unavailable (outage, maintenance): receives nothing

    @property
    def closed(self) -> bool:
        """Whether the router may send no new job here."""
        return self in (PoolState.DRAIN, PoolState.DOWN)


@dataclass(frozen=True)
class Service:
    """Set on a job that is an inference server: rendered as a Deployment per pool."""

    port: int
    replicas: int = 1


@dataclass(frozen=True)
class JobSpec:
    """One job, described without naming a vendor: the renderers add the vendor's facts."""

    name: str
    command: tuple[str, ...]
    images: Mapping[str, str]
    nodes: int = 1
    devices_per_node: int = 1
    cpus_per_node: int = 1
    memory: str = ""
    time_limit: str = ""
    env: Mapping[str, str] = field(default_factory=dict)
    launcher: str = "torchrun"
    rdzv_port: int = 29500
    workdir: str = ""
    job_id: str = ""
    service: Service | None = None
    source: str = ""

    @property
    def id(self) -> str:
        """What the router hashes: stable across resubmissions of the same job."""
        return self.job_id or self.name

    @property
    def devices(self) -> int:
        return self.nodes * self.devices_per_node

    @property
    def distributed(self) -> bool:
        return self.nodes > 1 or self.devices_per_node > 1

    @property
    def time_limit_seconds(self) -> int | None:
        if not self.time_limit:
            return None
        days, hours, minutes, seconds = _TIME.match(self.time_limit).groups()  # type: ignore[union-attr]
        return ((int(days or 0) * 24 + int(hours)) * 60 + int(minutes)) * 60 + int(seconds)

    def with_id(self, job_id: str) -> JobSpec:
        return replace(self, job_id=job_id)


@dataclass(frozen=True)
class SlurmTarget:
    partition: str
    gres: str
    gres_type: str = ""
    constraint: str = ""
    exclusive: bool = True
    requeue: bool = True
    account: str = ""
    qos: str = ""


@dataclass(frozen=True)
class KueueQueue:
    cluster_queue: str
    flavor: str
    cohort: str = "accelport-pools"
    api_version: str = "v1beta2"
    lending_limit: int | None = None
    borrowing_limit: int | None = None


@dataclass(frozen=True)
class KubernetesTarget:
    namespace: str
    resource: str
    node_selector: Mapping[str, str]
    tolerations: tuple[Mapping[str, Any], ...] = ()
    scheduler: str = "default"
    queue: str = ""
    scheduler_name: str = ""
    image: str = ""
    kueue: KueueQueue | None = None


@dataclass(frozen=True)
class Pool:
    """A set of machines of one vendor behind one scheduler, and its place in the ramp."""

    name: str
    vendor: VendorProfile
    engine: str
    state: PoolState = PoolState.PRIMARY
    weight: int = 1
    capacity: int = 0  # devices in the pool; 0: not stated
    failover_order: int = 100
    nodes: int = 0  # nodes in the pool; 0: not stated
    devices_per_node: int = 8
    cpus_per_node: int = 0  # 0: not stated
    memory_per_node: str = ""  # Kubernetes quantity (Ki/Mi/Gi/Ti); "": not stated
    slurm: SlurmTarget | None = None
    kubernetes: KubernetesTarget | None = None
    source: str = ""

    def on(self, engine: str) -> Pool:
        """This pool seen through another engine it also describes (for rendering both)."""
        if engine == self.engine:
            return self
        if engine not in ENGINES:
            raise UserError(f"unknown engine {engine!r}; use one of {', '.join(ENGINES)}")
        if getattr(self, engine) is None:
            raise UserError(f"{self.source}: pool {self.name!r} has no [pool.{engine}] table; add one to render it for {engine}")
        return replace(self, engine=engine)

    @property
    def devices(self) -> int:
        """Devices in the pool: the stated capacity, else nodes x devices per node; 0 when neither is known."""
        return self.capacity or self.nodes * self.devices_per_node

    @property
    def node_count(self) -> int:
        """Nodes in the pool: as stated, else the capacity in whole nodes; 0 when neither is known."""
        if self.nodes:
            return self.nodes
        return -(-self.capacity // self.devices_per_node) if self.capacity else 0


# --------------------------------------------------------------------------- safe to render


def _strings(value: Any, where: str) -> Iterator[tuple[str, str]]:
    """(field path, text) for every string a job or pool holds, keys of tables included."""
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, Enum):
        return
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for item in dataclasses.fields(value):
            if item.name not in _NOT_RENDERED:
                yield from _strings(getattr(value, item.name), f"{where}.{item.name}")
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield f"{where} key", str(key)
            yield from _strings(item, f"{where}.{key}")
    elif isinstance(value, tuple | list):
        for index, item in enumerate(value):
            yield from _strings(item, f"{where}[{index}]")


def _character_name(char: str) -> str:
    return {"\n": "a newline", "\r": "a carriage return", "\t": "a tab", "\x1b": "an ESC", "\x00": "a NUL"}.get(
        char, f"control character U+{ord(char):04X} {unicodedata.name(char, '')}".rstrip()
    )


def check_renderable(job: JobSpec | None = None, pool: Pool | None = None) -> None:
    """Refuse, naming the file and the field, any value that could change the shape of what is rendered.

    Every string of the job and the pool (and of the pool's vendor profile) is checked for
    control characters, wherever it is rendered: a newline in a workdir would otherwise put a
    bare shell line between the #SBATCH directives. Environment variable names and GRES names
    go into shell code unquoted, so they must be words. Quoting is the renderers' job; this
    check is what quoting cannot fix.
    """
    subjects: list[tuple[Any, str, str]] = []
    if job is not None:
        subjects.append((job, "job", job.source or f"job {job.name!r}"))
    if pool is not None:
        subjects.append((pool, f"pool.{pool.name}", pool.source or f"pool {pool.name!r}"))
    for subject, prefix, origin in subjects:
        for where, text in _strings(subject, prefix):
            bad = _CONTROL.search(text)
            if bad:
                where = _CONTROL.sub(lambda m: repr(m.group())[1:-1], where)  # the message stays one line
                raise UserError(
                    f"{origin}: {where} {text[:60]!r}{'...' if len(text) > 60 else ''} contains {_character_name(bad.group())}; a rendered script or manifest "
                    "cannot hold it safely: remove it"
                )
    if job is not None:
        for key in job.env:
            if not _ENV_NAME.match(key):
                raise UserError(f"{subjects[0][2]}: job.env.{key} is not a valid environment variable name (letters, digits, '_')")
    if pool is not None:
        origin = pool.source or f"pool {pool.name!r}"
        for variable in pool.vendor.visible_devices:
            if not _ENV_NAME.match(variable):
                raise UserError(f"{origin}: vendor {pool.vendor.key}: visible-devices variable {variable!r} is not a valid name")
        if pool.slurm is not None:
            for key in ("gres", "gres_type"):
                value = getattr(pool.slurm, key)
                if value and not _GRES_WORD.match(value):
                    raise UserError(
                        f"{origin}: pool.{pool.name}.slurm.{key} {value!r} must be letters, digits, '_', '.' or '-' "
                        "(a Slurm GRES name or type)"
                    )


# --------------------------------------------------------------------------- parsing


class _Table:
    """A TOML table being read: every key used is ticked off, the rest are reported."""

    def __init__(self, data: Any, where: str, origin: str) -> None:
        if not isinstance(data, Mapping):
            raise UserError(f"{origin}: {where} must be a table; see docs/pools.md for the format")
        self.data = dict(data)
        self.where = where
        self.origin = origin
        self.used: set[str] = set()

    def _fail(self, key: str, what: str) -> UserError:
        return UserError(f"{self.origin}: {self.where}.{key} {what}")

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = ..., *, required: bool = False) -> Any:
        self.used.add(key)
        if key not in self.data:
            if required or default is ...:
                raise self._fail(key, "is missing; add it")
            return default
        value = self.data[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        # TOML booleans are ints in Python: never let `true` pass as a count.
        if isinstance(value, bool) and bool not in kinds:
            raise self._fail(key, f"must be {_kind_name(kinds)}, got {value!r}")
        if not isinstance(value, kinds):
            raise self._fail(key, f"must be {_kind_name(kinds)}, got {value!r}")
        return value

    def positive(self, key: str, default: Any = ..., minimum: int = 1) -> int:
        value = self.get(key, int, default)
        if value is None:
            return None  # type: ignore[return-value]
        if value < minimum:
            raise self._fail(key, f"must be an integer >= {minimum}, got {value}")
        return value

    def choice(self, key: str, choices: tuple[str, ...], default: Any = ...) -> str:
        value = self.get(key, str, default)
        if value not in choices:
            raise self._fail(key, f"must be one of {', '.join(choices)}; got {value!r}")
        return value

    def strings(self, key: str, default: Any = ...) -> tuple[str, ...]:
        value = self.get(key, list, default)
        if not all(isinstance(v, str) for v in value):
            raise self._fail(key, "must be a list of strings")
        return tuple(value)

    def string_map(self, key: str, default: Any = ...) -> dict[str, str]:
        value = self.get(key, dict, default)
        for k, v in value.items():
            if not isinstance(v, str):
                raise self._fail(f"{key}.{k}", f"must be a string, got {v!r}")
        return dict(value)

    def sub(self, key: str) -> _Table | None:
        self.used.add(key)
        if key not in self.data:
            return None
        return _Table(self.data[key], f"{self.where}.{key}", self.origin)

    def done(self) -> None:
        unknown = sorted(set(self.data) - self.used)
        if unknown:
            known = ", ".join(sorted(self.used))
            raise UserError(f"{self.origin}: {self.where} has unknown key(s) {', '.join(unknown)}; known keys: {known}")


def _kind_name(kinds: tuple[type, ...]) -> str:
    names = {int: "an integer", str: "a string", bool: "true or false", list: "a list", dict: "a table"}
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def _read_toml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    text = read_input_text(path, "TOML file")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path}: not valid TOML ({exc}); fix the syntax") from None


def _check_name(value: str, where: str, origin: str) -> str:
    if len(value) > 50 or not _DNS_LABEL.match(value):
        raise UserError(
            f"{origin}: {where} {value!r} must be lower-case letters, digits and '-', at most 50 characters, "
            "starting and ending with a letter or digit (it becomes a Kubernetes and Slurm name)"
        )
    return value


def job_from_toml(path: str | Path) -> JobSpec:
    """Read a `[job]` table; any mistake is a UserError naming the file and the key."""
    origin = str(path)
    data = _read_toml(path)
    top = _Table(data, "file", origin)
    table = top.sub("job")
    if table is None:
        raise UserError(f"{origin}: has no [job] table; see examples/pools/job.toml")
    top.done()
    name = _check_name(table.get("name", str, required=True), "job.name", origin)
    command = table.strings("command")
    if not command:
        raise UserError(f"{origin}: job.command is empty; give the script and its arguments")
    images_table = table.sub("images")
    images: dict[str, str] = {}
    if images_table is not None:
        for vendor_key, image in images_table.data.items():
            images_table.used.add(vendor_key)
            if vendor_key not in knowledge.vendors():
                raise UserError(
                    f"{origin}: job.images.{vendor_key} is not a known vendor; known: {', '.join(sorted(knowledge.vendors()))}"
                )
            if not isinstance(image, str) or not image:
                raise UserError(f"{origin}: job.images.{vendor_key} must be a non-empty image reference")
            images[vendor_key] = image
    memory = table.get("memory", str, "")
    if memory and not _MEMORY.match(memory):
        raise UserError(f"{origin}: job.memory {memory!r} must be an integer with Ki, Mi, Gi or Ti (for example '64Gi')")
    time_limit = table.get("time_limit", str, "")
    if time_limit and not _TIME.match(time_limit):
        raise UserError(f"{origin}: job.time_limit {time_limit!r} must be HH:MM:SS or D-HH:MM:SS")
    env = table.string_map("env", {})
    for key in env:
        if not _ENV_NAME.match(key):
            raise UserError(f"{origin}: job.env.{key} is not a valid environment variable name")
    launcher = table.choice("launcher", LAUNCHERS, "torchrun")
    service = None
    service_table = table.sub("service")
    if service_table is not None:
        service = Service(
            port=service_table.positive("port"),
            replicas=service_table.positive("replicas", 1),
        )
        service_table.done()
    job = JobSpec(
        name=name,
        command=command,
        images=images,
        nodes=table.positive("nodes", 1),
        devices_per_node=table.positive("devices_per_node", 1),
        cpus_per_node=table.positive("cpus_per_node", 1),
        memory=memory,
        time_limit=time_limit,
        env=env,
        launcher=launcher,
        rdzv_port=table.positive("rdzv_port", 29500),
        workdir=table.get("workdir", str, ""),
        job_id=table.get("id", str, ""),
        service=service,
        source=origin,
    )
    table.done()
    if service is not None and job.nodes != 1:
        raise UserError(f"{origin}: job.service is set, so job.nodes must be 1 (replicas scale a service, not nodes)")
    if service is not None and launcher != "none":
        raise UserError(f"{origin}: job.service is set, so job.launcher must be \"none\" (the command is the server)")
    check_renderable(job)
    return job


def _kueue_from(table: _Table, pool_name: str) -> KueueQueue:
    queue = KueueQueue(
        cluster_queue=_check_name(table.get("cluster_queue", str, f"{pool_name}-cq"), f"{table.where}.cluster_queue", table.origin),
        flavor=_check_name(table.get("flavor", str, pool_name), f"{table.where}.flavor", table.origin),
        cohort=_check_name(table.get("cohort", str, "accelport-pools"), f"{table.where}.cohort", table.origin),
        api_version=table.choice("api_version", KUEUE_API_VERSIONS, "v1beta2"),
        lending_limit=table.positive("lending_limit", None, minimum=0),
        borrowing_limit=table.positive("borrowing_limit", None, minimum=0),
    )
    table.done()
    return queue


def _tolerations(table: _Table) -> tuple[dict[str, Any], ...]:
    raw = table.get("tolerations", list, [])
    allowed = {"key", "operator", "value", "effect", "tolerationSeconds"}
    result = []
    for index, item in enumerate(raw):
        where = f"{table.where}.tolerations[{index}]"
        if not isinstance(item, dict):
            raise UserError(f"{table.origin}: {where} must be a table like {{ key = \"...\", effect = \"NoSchedule\" }}")
        unknown = sorted(set(item) - allowed)
        if unknown:
            raise UserError(f"{table.origin}: {where} has unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(allowed))}")
        if item.get("operator", "Equal") not in ("Equal", "Exists"):
            raise UserError(f"{table.origin}: {where}.operator must be Equal or Exists")
        if item.get("effect", "") not in ("", "NoSchedule", "PreferNoSchedule", "NoExecute"):
            raise UserError(f"{table.origin}: {where}.effect must be NoSchedule, PreferNoSchedule or NoExecute")
        result.append(dict(item))
    return tuple(result)


def _pool_from(table: _Table) -> Pool:
    origin = table.origin
    name = _check_name(table.get("name", str, required=True), f"{table.where}.name", origin)
    table.where = f"pool.{name}"
    vendor_key = table.get("vendor", str, required=True)
    profiles = knowledge.vendors()
    if vendor_key not in profiles:
        raise UserError(f"{origin}: pool.{name}.vendor {vendor_key!r} is unknown; known vendors: {', '.join(sorted(profiles))}")
    profile = profiles[vendor_key]
    engine = table.choice("engine", ENGINES)
    state_name = table.choice("state", tuple(s.value for s in PoolState), "primary")
    slurm = None
    slurm_table = table.sub("slurm")
    if slurm_table is not None:
        gres = slurm_table.get("gres", str, profile.slurm_gres)
        if not gres:
            raise UserError(f"{origin}: pool.{name}.slurm.gres is empty and vendor {vendor_key} has no Slurm GRES; set one")
        slurm = SlurmTarget(
            partition=slurm_table.get("partition", str, required=True),
            gres=gres,
            gres_type=slurm_table.get("gres_type", str, ""),
            constraint=slurm_table.get("constraint", str, ""),
            exclusive=slurm_table.get("exclusive", bool, True),
            requeue=slurm_table.get("requeue", bool, True),
            account=slurm_table.get("account", str, ""),
            qos=slurm_table.get("qos", str, ""),
        )
        slurm_table.done()
    kube = None
    kube_table = table.sub("kubernetes")
    if kube_table is not None:
        resource = kube_table.get("resource", str, profile.k8s_resources[0] if profile.k8s_resources else "")
        if not resource:
            raise UserError(f"{origin}: pool.{name}.kubernetes.resource is empty and vendor {vendor_key} has none; set one")
        scheduler = kube_table.choice("scheduler", SCHEDULERS, "default")
        kueue = None
        kueue_table = kube_table.sub("kueue")
        if kueue_table is not None:
            kueue = _kueue_from(kueue_table, name)
        if scheduler == "kueue" and kueue is None:
            kueue = KueueQueue(cluster_queue=f"{name}-cq", flavor=name)
        queue = kube_table.get("queue", str, "")
        if scheduler in ("kueue", "volcano") and not queue:
            raise UserError(
                f"{origin}: pool.{name}.kubernetes.queue is missing; scheduler {scheduler!r} needs the "
                f"{'LocalQueue' if scheduler == 'kueue' else 'Volcano queue'} name"
            )
        kube = KubernetesTarget(
            namespace=_check_name(kube_table.get("namespace", str, "default"), f"pool.{name}.kubernetes.namespace", origin),
            resource=resource,
            node_selector=kube_table.string_map("node_selector", dict(profile.k8s_node_labels)),
            tolerations=_tolerations(kube_table),
            scheduler=scheduler,
            queue=queue,
            scheduler_name=kube_table.get("scheduler_name", str, ""),
            image=kube_table.get("image", str, ""),
            kueue=kueue,
        )
        kube_table.done()
    weight = table.positive("weight", 1, minimum=0)
    if weight > 100:
        raise UserError(f"{origin}: pool.{name}.weight is {weight}; a weight is the pool's share of the ramp in percent, 0 to 100")
    memory_per_node = table.get("memory_per_node", str, "")
    if memory_per_node and not _MEMORY.match(memory_per_node):
        raise UserError(
            f"{origin}: pool.{name}.memory_per_node {memory_per_node!r} must be an integer with Ki, Mi, Gi or Ti (for example '512Gi')"
        )
    pool = Pool(
        name=name,
        vendor=profile,
        engine=engine,
        state=PoolState(state_name),
        weight=weight,
        capacity=table.positive("capacity", 0, minimum=0),
        failover_order=table.positive("failover_order", 100, minimum=0),
        nodes=table.positive("nodes", 0, minimum=0),
        devices_per_node=table.positive("devices_per_node", 8),
        cpus_per_node=table.positive("cpus_per_node", 0, minimum=0),
        memory_per_node=memory_per_node,
        slurm=slurm,
        kubernetes=kube,
        source=origin,
    )
    table.done()
    if pool.nodes and pool.capacity and pool.capacity != pool.nodes * pool.devices_per_node:
        raise UserError(
            f"{origin}: pool.{name}.capacity is {pool.capacity} but nodes x devices_per_node is "
            f"{pool.nodes} x {pool.devices_per_node} = {pool.nodes * pool.devices_per_node}; drop capacity or make them agree"
        )
    if pool.nodes and not pool.capacity:
        pool = replace(pool, capacity=pool.devices)
    if getattr(pool, engine) is None:
        raise UserError(f"{origin}: pool.{name}.engine is {engine!r} but there is no [pool.{engine}] table; add it")
    check_renderable(pool=pool)
    return pool


def scale_memory(quantity: str, factor: int) -> str:
    """`factor` times a quantity like '512Gi', in the same unit."""
    number, unit = _MEMORY.match(quantity).groups()  # type: ignore[union-attr]
    return f"{int(number) * factor}{unit}"


def pools_from_toml(path: str | Path) -> list[Pool]:
    """Read every `[[pool]]` (or a single `[pool]`) table of one file."""
    origin = str(path)
    data = _read_toml(path)
    top = _Table(data, "file", origin)
    raw = top.get("pool", (list, dict), None)
    top.done()
    if raw is None:
        raise UserError(f"{origin}: has no [[pool]] table; see examples/pools/cuda-pool.toml")
    tables = [raw] if isinstance(raw, dict) else raw
    pools = [_pool_from(_Table(t, f"pool[{i}]", origin)) for i, t in enumerate(tables)]
    return pools


def load_pools(paths: list[str | Path]) -> list[Pool]:
    """Pools from several files; two pools with one name are an error."""
    if not paths:
        raise ParameterHint("no pool files given; name at least one (see examples/pools/)", "paths")
    pools: list[Pool] = []
    seen: dict[str, str] = {}
    files: set[Path] = set()
    for path in paths:
        resolved = Path(path).resolve()
        if resolved in files:
            raise ParameterHint(f"{path}: given twice as a pool file; give each pool file once", "paths")
        files.add(resolved)
        for pool in pools_from_toml(path):
            if pool.name in seen:
                where = "earlier in the same file" if seen[pool.name] == str(path) else f"in {seen[pool.name]}"
                raise UserError(f"{path}: pool {pool.name!r} is also defined {where}; pool names must be unique")
            seen[pool.name] = str(path)
            pools.append(pool)
    ramp = [p for p in pools if p.state in (PoolState.PRIMARY, PoolState.CANARY)]
    total = sum(p.weight for p in ramp)
    if total > 100:
        shares = " + ".join(f"{p.name} {p.weight}" for p in ramp)
        raise UserError(
            f"the primary and canary pools' weights add up to {total}% ({shares}); weights are percent shares of "
            "the ramp: lower them so they add up to 100 at most"
        )
    return pools


def find_pool(pools: list[Pool], name: str) -> Pool:
    for pool in pools:
        if pool.name == name:
            return pool
    raise UserError(f"no pool named {name!r}; pools given: {', '.join(p.name for p in pools)}")
