"""Check rendered objects and scripts before anything is submitted.

Kubernetes built-in kinds: the official schemas through kubernetes-validate in strict mode.
Kueue and Volcano kinds: their CRD openAPIV3Schemas kept in `pools/crds/`, made strict
(unknown fields rejected, as `kubectl --validate=strict` does). On top of both, what the
schemas let through: device counts that are not integers (the schema accepts
`nvidia.com/gpu: "two"`), and extended resources whose requests differ from their limits.
Slurm scripts: `bash -n`, the `#SBATCH` lines read as sbatch reads them, and optionally `sbatch --test-only`.
"""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from accelport.errors import InvalidValue, MissingDependency
from accelport.pools.launch import scheduler_facts
from accelport.pools.slurm import DirectiveError, directive_arguments

_QUANTITY = re.compile(r"^[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[KMGTPE]i|[numkMGTPE]|[eE][+-]?\d+)?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_CRD_GROUPS = ("kueue.x-k8s.io", "batch.volcano.sh", "scheduling.volcano.sh")


@dataclass(frozen=True)
class Problem:
    """One reason an object or script would be rejected or would misbehave."""

    subject: str  # "Job/ft-ascend", "ft-ascend.sbatch"
    path: str  # where inside it ("spec.template.spec.containers[0].resources"), or ""
    message: str
    check: str  # schema | crd | resources | gateway | bash | sbatch

    def __str__(self) -> str:
        where = f" at {self.path}" if self.path else ""
        return f"{self.subject}{where}: {self.message} [{self.check}]"

    def to_dict(self) -> dict[str, str]:
        return {"subject": self.subject, "path": self.path, "message": self.message, "check": self.check}


@dataclass(frozen=True)
class Checked:
    """What was checked, and how: the report lists this so nothing passes unexamined."""

    subject: str
    checks: tuple[str, ...]


def _subject(obj: Any) -> str:
    if not isinstance(obj, dict):
        return "<not an object>"
    name = (obj.get("metadata") or {}).get("name", "?") if isinstance(obj.get("metadata"), dict) else "?"
    return f"{obj.get('kind', '?')}/{name}"


def default_k8s_version() -> str:
    return scheduler_facts()["kubernetes"]["schema_version"]


# --------------------------------------------------------------------------- built-in kinds


def _kubernetes_validate():
    try:
        import kubernetes_validate
    except ModuleNotFoundError:
        raise MissingDependency("kubernetes-validate", "pools", "validating Kubernetes objects") from None
    return kubernetes_validate


def check_k8s_version(version: str) -> str:
    """`version` if kubernetes-validate has its schemas, else a UserError listing the ones it has."""
    kv = _kubernetes_validate()
    known = sorted({".".join(v.split(".")[:2]) for v in kv.utils.all_versions()}, key=lambda v: tuple(int(p) for p in v.split(".")))
    wanted = re.match(r"^v?(\d+)\.(\d+)(?:\.\d+)?$", version.strip())
    if wanted is None or f"{wanted[1]}.{wanted[2]}" not in known:
        raise InvalidValue(
            "version", repr(version), f"no schemas for it in kubernetes-validate; use one of {known[0]} ... {known[-1]}"
        )
    return version


def _builtin_problems(obj: dict[str, Any], version: str, subject: str, prefix: str = "") -> list[Problem]:
    kv = _kubernetes_validate()
    try:
        kv.validate(obj, version, strict=True)
    except kv.ValidationError as exc:
        path = ".".join(str(p) for p in exc.path)
        if prefix:
            path = f"{prefix}.{path}" if path else prefix
        return [Problem(subject, path, exc.message, "schema")]
    except kv.utils.VersionNotSupportedError:
        check_k8s_version(version)
        raise
    except kv.SchemaNotFoundError:
        return [Problem(subject, "", f"no Kubernetes {version} schema for {obj.get('apiVersion')} {obj.get('kind')}", "schema")]
    return []


# --------------------------------------------------------------------------- CRD kinds


def _strict(schema: Any) -> Any:
    """Reject unknown fields wherever the CRD lists its fields (the API server would drop them)."""
    if isinstance(schema, dict):
        schema = {k: _strict(v) for k, v in schema.items()}
        if "properties" in schema and "additionalProperties" not in schema and not schema.get(
            "x-kubernetes-preserve-unknown-fields"
        ):
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


@cache
def crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> {'schema': strict openAPIV3Schema, 'source': provenance}."""
    import yaml

    found = {}
    folder = resources.files("accelport.pools").joinpath("crds")
    for entry in folder.iterdir():
        if not entry.name.endswith(".yaml"):
            continue
        data = yaml.safe_load(entry.read_text(encoding="utf-8"))
        for version, schema in data["versions"].items():
            found[(f"{data['group']}/{version}", data["kind"])] = {
                "schema": _strict(copy.deepcopy(schema)),
                "source": data["source"],
                "file": entry.name,
            }
    return found


def _crd_problems(obj: dict[str, Any], version: str, subject: str) -> list[Problem]:
    import jsonschema

    entry = crd_schemas().get((obj.get("apiVersion", ""), obj.get("kind", "")))
    if entry is None:
        known = ", ".join(sorted(f"{a} {k}" for a, k in crd_schemas()))
        return [Problem(subject, "", f"no CRD schema for {obj.get('apiVersion')} {obj.get('kind')}; accelport knows {known}", "crd")]
    validator = jsonschema.Draft202012Validator(entry["schema"])
    problems = [
        Problem(subject, ".".join(str(p) for p in error.absolute_path), error.message, "crd")
        for error in sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path)))
    ]
    metadata = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    name = metadata.get("name", "")
    if not isinstance(name, str) or not _DNS_SUBDOMAIN.match(name) or len(name) > 253:
        problems.append(Problem(subject, "metadata.name", f"{name!r} is not a valid object name", "crd"))
    if obj.get("kind") == "Job" and obj.get("apiVersion", "").startswith("batch.volcano.sh/"):
        # The CRD's embedded PodSpec is checked as a core/v1 PodTemplate (see crds/README.md).
        for index, task in enumerate((obj.get("spec") or {}).get("tasks") or []):
            if isinstance(task, dict) and isinstance(task.get("template"), dict):
                wrapper = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "task"}, "template": task["template"]}
                for problem in _builtin_problems(wrapper, version, subject):
                    path = problem.path.removeprefix("template")
                    problems.append(Problem(subject, f"spec.tasks.{index}.template{path}", problem.message, "schema"))
    return problems


# --------------------------------------------------------------------------- what schemas miss


def _is_extended(resource: str) -> bool:
    facts = scheduler_facts()["kubernetes"]
    if resource in facts["native_resources"]:
        return False
    if any(resource.startswith(prefix) for prefix in facts["native_resource_prefixes"]):
        return False
    return "/" in resource


def _pod_specs(obj: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    kind = obj.get("kind")
    if obj.get("apiVersion", "").startswith("batch.volcano.sh/") and kind == "Job":
        for index, task in enumerate(spec.get("tasks") or []):
            template = task.get("template") if isinstance(task, dict) else None
            if isinstance(template, dict) and isinstance(template.get("spec"), dict):
                yield f"spec.tasks.{index}.template.spec", template["spec"]
    elif kind in ("Job", "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "PodTemplate"):
        holder = obj.get("template") if kind == "PodTemplate" else spec.get("template")
        if isinstance(holder, dict) and isinstance(holder.get("spec"), dict):
            prefix = "template.spec" if kind == "PodTemplate" else "spec.template.spec"
            yield prefix, holder["spec"]
    elif kind == "Pod" and spec:
        yield "spec", spec


def _integer_count(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return value >= 0
    return isinstance(value, str) and value.isdigit()


def resource_problems(obj: dict[str, Any]) -> list[Problem]:
    """Extended resources: whole, non-negative counts; requests equal to limits; limits present."""
    subject = _subject(obj)
    problems = []
    for prefix, pod_spec in _pod_specs(obj):
        for group in ("initContainers", "containers"):
            for index, container in enumerate(pod_spec.get(group) or []):
                if not isinstance(container, dict):
                    continue
                res = container.get("resources") or {}
                limits = res.get("limits") or {}
                requests = res.get("requests") or {}
                path = f"{prefix}.{group}.{index}.resources"
                for section_name, section in (("limits", limits), ("requests", requests)):
                    if not isinstance(section, dict):
                        continue
                    for name, value in section.items():
                        if _is_extended(name):
                            if not _integer_count(value):
                                problems.append(
                                    Problem(subject, f"{path}.{section_name}.{name}", f"{value!r} is not a whole device count; extended resources take integers only", "resources")
                                )
                        elif not _QUANTITY.match(str(value)):
                            problems.append(Problem(subject, f"{path}.{section_name}.{name}", f"{value!r} is not a Kubernetes quantity", "resources"))
                if not isinstance(limits, dict) or not isinstance(requests, dict):
                    continue
                for name in sorted(set(limits) | set(requests)):
                    if not _is_extended(name):
                        continue
                    if name not in limits:
                        problems.append(Problem(subject, f"{path}.limits", f"extended resource {name} is requested but has no limit; set limits (requests default to them)", "resources"))
                    elif name in requests and str(requests[name]) != str(limits[name]):
                        problems.append(
                            Problem(subject, f"{path}.requests.{name}", f"requests ({requests[name]!r}) must equal limits ({limits[name]!r}) for extended resource {name}", "resources")
                        )
    return problems


def _http_route_problems(obj: dict[str, Any]) -> list[Problem]:
    """The HTTPRoute fields accelport renders; the Gateway API CRD itself is not bundled."""
    subject = _subject(obj)
    problems = []
    max_weight = scheduler_facts()["gateway"]["max_weight"]
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    if not spec.get("parentRefs"):
        problems.append(Problem(subject, "spec.parentRefs", "an HTTPRoute needs at least one parentRef (the Gateway)", "gateway"))
    total = 0
    for r, rule in enumerate(spec.get("rules") or []):
        for b, ref in enumerate(rule.get("backendRefs") or []):
            path = f"spec.rules.{r}.backendRefs.{b}"
            weight = ref.get("weight", 1)
            if isinstance(weight, bool) or not isinstance(weight, int) or not 0 <= weight <= max_weight:
                problems.append(Problem(subject, f"{path}.weight", f"{weight!r} must be an integer from 0 to {max_weight}", "gateway"))
            else:
                total += weight
            port = ref.get("port")
            if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
                problems.append(Problem(subject, f"{path}.port", f"{port!r} must be a port number (1-65535)", "gateway"))
            if not isinstance(ref.get("name"), str) or not _DNS_SUBDOMAIN.match(ref.get("name", "")):
                problems.append(Problem(subject, f"{path}.name", f"{ref.get('name')!r} is not a Service name", "gateway"))
    if not problems and total == 0:
        problems.append(Problem(subject, "spec.rules", "every backend has weight 0: the route would send traffic nowhere", "gateway"))
    return problems


def checks_for(obj: dict[str, Any]) -> tuple[str, ...]:
    api = obj.get("apiVersion", "")
    group = api.split("/")[0] if "/" in api else ""
    if obj.get("kind") == "HTTPRoute" and group == "gateway.networking.k8s.io":
        return ("gateway",)
    if group in _CRD_GROUPS:
        return ("crd", "schema", "resources") if obj.get("kind") == "Job" else ("crd",)
    return ("schema", "resources")


def validate_object(obj: Any, version: str | None = None) -> list[Problem]:
    """Every problem found in one Kubernetes object (empty list: it passed every check)."""
    version = version or default_k8s_version()
    subject = _subject(obj)
    if not isinstance(obj, dict) or not obj.get("apiVersion") or not obj.get("kind"):
        return [Problem(subject, "", "not a Kubernetes object (needs apiVersion and kind)", "schema")]
    checks = checks_for(obj)
    if checks == ("gateway",):
        return _http_route_problems(obj)
    problems = _crd_problems(obj, version, subject) if "crd" in checks else _builtin_problems(obj, version, subject)
    if "resources" in checks:
        problems += resource_problems(obj)
    return problems


# --------------------------------------------------------------------------- Slurm scripts


def _directive_problems(script: str, subject: str) -> list[Problem]:
    """The shebang, control characters, and every `#SBATCH` line read the way sbatch reads it."""
    problems = []
    if not script.startswith("#!"):
        problems.append(Problem(subject, "line 1", "a batch script must start with #! (sbatch refuses it otherwise)", "sbatch"))
    in_header = True  # sbatch reads directives up to the first line that is neither blank nor a comment
    for number, line in enumerate(script.split("\n"), 1):
        where = f"line {number}"
        bad = re.search(r"[\x00-\x08\x0b-\x1f\x7f]", line)
        if bad:
            problems.append(Problem(subject, where, f"control character {bad.group()!r}: a script line cannot hold it safely", "sbatch"))
        if in_header and line.strip() and not line.startswith("#"):
            in_header = False
        if not line.startswith("#SBATCH"):
            continue
        if not in_header:
            problems.append(Problem(subject, where, f"{line!r} comes after the first command: sbatch ignores it", "sbatch"))
            continue
        try:
            arguments = directive_arguments(line)
        except DirectiveError as exc:
            problems.append(Problem(subject, where, f"malformed directive {line!r}: {exc}", "sbatch"))
            continue
        if not arguments or not arguments[0].startswith("-"):
            problems.append(Problem(subject, where, f"malformed directive {line!r}: no option after #SBATCH", "sbatch"))
    return problems


def sbatch_problems(script: str, subject: str, *, test_only: bool = False, env: dict[str, str] | None = None) -> list[Problem]:
    """`bash -n`, well-formed `#SBATCH` lines, and with `test_only` a real `sbatch --test-only`."""
    problems = _directive_problems(script, subject)
    bash = shutil.which("bash")
    with tempfile.TemporaryDirectory(prefix="accelport-sbatch-") as tmp:
        path = Path(tmp) / "job.sbatch"
        path.write_text(script, encoding="utf-8")
        if bash is None:
            problems.append(Problem(subject, "", "bash not found on PATH: `bash -n` could not check the script", "bash"))
        else:
            done = subprocess.run([bash, "-n", str(path)], capture_output=True, text=True, check=False)
            if done.returncode:
                problems.append(Problem(subject, "", done.stderr.strip().replace(str(path), subject), "bash"))
        if test_only:
            sbatch = shutil.which("sbatch")
            if sbatch is None:
                problems.append(Problem(subject, "", "sbatch not found on PATH; --sbatch-test needs a Slurm client", "sbatch"))
            else:
                done = subprocess.run(
                    [sbatch, "--test-only", str(path)], capture_output=True, text=True, check=False, env=env, timeout=60
                )
                if done.returncode:
                    problems.append(Problem(subject, "", f"sbatch --test-only: {done.stderr.strip()}", "sbatch"))
    return problems
