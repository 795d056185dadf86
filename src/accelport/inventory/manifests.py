"""Dependency manifests: requirements files, pyproject.toml, setup.cfg and conda environment files.

Requirements are parsed with `packaging` (PEP 508) after pip's own line rules
(comments, continuations, options); TOML with tomllib, setup.cfg with
configparser, conda files with PyYAML's composer (which keeps line numbers).
Each CUDA-specific distribution, local version, package index or conda package
becomes a finding with what to use per target where it is known.
"""

from __future__ import annotations

import configparser
import re
from collections.abc import Iterator
from dataclasses import dataclass

from accelport import knowledge
from accelport.findings import BackendStatus, Finding, Location
from accelport.inventory.base import (
    FileScanner,
    ScanSkipped,
    SourceFile,
    backend_statuses,
    make_finding,
)

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

_CUDA_INDEX = re.compile(r"/(?:whl/)?cu\d{2,3}\b|/cuda\d|nvidia\.com|pypi\.nvidia\.com")
_CUDA_LOCAL = re.compile(r"\+cu\d+")
_NVIDIA_WHEEL = re.compile(r"nvidia-[a-z0-9-]+-cu(?:da)?\d+[a-z]*|nvidia-[a-z0-9-]+")
_CUDA_SUFFIXED = re.compile(r"[a-z0-9-]+-cuda\d+x?|[a-z0-9-]+-cu\d+|[a-z0-9-]+-gpu|pytorch-cuda")
_CUDA_EXTRA = re.compile(r"cuda\d*(?:[_-]\w+)?|and-cuda|gpu")
# conda packages that are the CUDA toolkit, its libraries or a CUDA build of PyTorch.
_CONDA_CUDA = re.compile(
    r"cudatoolkit(?:-dev)?|cuda(?:-[a-z0-9-]+)?|pytorch-cuda|cudnn|nccl|libcublas\S*|libcufft\S*|libcurand\S*"
    r"|libcusolver\S*|libcusparse\S*|libnccl\S*|libcudnn\S*|magma-cuda\d+|cupy"
)


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@knowledge.derived_cache
def _package_index() -> dict[str, dict]:
    """CUDA-only packages from knowledge/packages.toml, keyed by canonical distribution name."""
    index = {}
    try:
        packages = knowledge.packages()
    except FileNotFoundError:  # the catalogue ships with the Python scanner
        return {}
    for entry in packages.values():
        for dist in entry.get("pip", ()):
            index[_canonical(dist)] = entry
    return index


def _package_backends(entry: dict) -> dict[str, BackendStatus]:
    statuses = {key: BackendStatus.UNKNOWN for key in knowledge.vendors()}
    statuses["cuda"] = BackendStatus.OK
    if entry.get("portable"):
        statuses = {key: BackendStatus.PORTABLE for key in statuses} | {"cuda": BackendStatus.OK}
    for vendor in entry.get("alternatives", {}):
        if vendor in statuses:
            statuses[vendor] = BackendStatus.ALTERNATIVE
    for vendor in entry.get("unsupported", ()):
        if vendor in statuses:
            statuses[vendor] = BackendStatus.UNSUPPORTED
    return statuses


def _wheel_backends() -> dict[str, BackendStatus]:
    # Every non-NVIDIA target drops or swaps the pin; nothing is lost doing so.
    return backend_statuses(cuda_like=BackendStatus.PORTABLE, others=BackendStatus.PORTABLE)


def _requirement(text: str):
    # packaging is imported on first use: it costs start-up time on trees with no manifest.
    from packaging.requirements import Requirement

    return Requirement(text)


@dataclass(frozen=True, slots=True)
class Span:
    """Where a requirement sits in its file (1-based line, columns)."""

    line: int
    column: int
    end_column: int


def requirement_findings(text: str, display: str, span: Span, snippet: str) -> Iterator[Finding]:
    """Findings for one PEP 508 requirement string (or a pip option line)."""
    location = Location(display, span.line, span.column, span.line, span.end_column)
    stripped = text.strip()
    if stripped.startswith("-"):
        yield from _option_findings(stripped, location, snippet)
        return
    try:
        requirement = _requirement(stripped)
    except ValueError:  # packaging's InvalidRequirement
        # Not PEP 508: a bare URL or path. Only a CUDA wheel URL says anything.
        if _CUDA_INDEX.search(stripped) or _CUDA_LOCAL.search(stripped):
            yield make_finding("AP8102", symbol=stripped, location=location, snippet=snippet, backends=_wheel_backends())
        return
    name = _canonical(requirement.name)
    specifier = str(requirement.specifier)
    package = _package_index().get(name)
    if package is not None:
        alternatives = package.get("alternatives", {})
        parts = [f"{vendor}: {what}" for vendor, what in sorted(alternatives.items())]
        if package.get("portable"):
            parts.insert(0, f"portable: {package['portable']}")
        message = f"{requirement.name}: {package.get('summary', 'CUDA-only package')}"
        if parts:
            message += "; " + "; ".join(parts)
        yield make_finding(
            "AP8104",
            symbol=requirement.name,
            location=location,
            snippet=snippet,
            message=message,
            replacement=package.get("portable"),
            backends=_package_backends(package),
            effort=package.get("effort"),
        )
    elif name.startswith("nvidia-") and _NVIDIA_WHEEL.fullmatch(name):
        yield make_finding("AP8101", symbol=requirement.name, location=location, snippet=snippet, backends=_wheel_backends())
    elif _CUDA_SUFFIXED.fullmatch(name) or any(_CUDA_EXTRA.fullmatch(extra.lower()) for extra in requirement.extras):
        yield make_finding(
            "AP8102",
            symbol=str(requirement),
            location=location,
            snippet=snippet,
            message=f"{requirement} selects a CUDA build by its name or extra",
            backends=_wheel_backends(),
        )
    if _CUDA_LOCAL.search(specifier) or (requirement.url and _CUDA_INDEX.search(requirement.url)):
        yield make_finding(
            "AP8102",
            symbol=str(requirement),
            location=location,
            snippet=snippet,
            message=f"{requirement} pins a CUDA build (local version or wheel URL)",
            backends=_wheel_backends(),
        )


def _option_findings(line: str, location: Location, snippet: str) -> Iterator[Finding]:
    option, _, value = line.partition(" ")
    if "=" in option and option.startswith("--"):
        option, _, value = option.partition("=")
    value = value.strip()
    if option in ("-i", "--index-url", "--extra-index-url", "-f", "--find-links") and _CUDA_INDEX.search(value):
        yield make_finding(
            "AP8103",
            symbol=value,
            location=location,
            snippet=snippet,
            message=f"CUDA package index {value}",
            backends=_wheel_backends(),
        )


def _logical_requirement_lines(text: str) -> Iterator[tuple[int, int, str]]:
    """(line number, column, content) per logical line of a requirements file, comments removed."""
    pending: list[str] = []
    first = 0
    column = 1
    for number, raw in enumerate(text.splitlines(), start=1):
        line = re.sub(r"(^|\s)#.*$", "", raw)  # pip: '#' starts a comment at line start or after whitespace
        if not pending:
            first = number
            column = len(line) - len(line.lstrip()) + 1
        if line.endswith("\\"):
            pending.append(line[:-1])
            continue
        pending.append(line)
        content = " ".join(part.strip() for part in pending).strip()
        pending = []
        if content:
            yield first, column, content
    if pending:
        content = " ".join(part.strip() for part in pending).strip()
        if content:
            yield first, column, content


class ManifestScanner(FileScanner):
    """requirements*.txt, constraints*.txt, pyproject.toml, setup.cfg, conda environment files."""

    name = "manifest"
    filenames = ("pyproject.toml", "setup.cfg", "Pipfile")
    filename_patterns = (
        r"(?i)requirements.*\.(?:txt|in)",
        r"(?i)constraints.*\.txt",
        r"(?i)(?:conda[-_.]?)?env(?:ironment)?(?:[-_.][\w.-]+)?\.ya?ml",
    )
    prefilter = re.compile(
        rb"(?i)cuda|\+cu\d|/cu\d|nvidia|flash[-_]attn|xformers|bitsandbytes|apex|pycuda|cupy|transformer[-_]engine"
        rb"|triton|deepspeed|nccl|cudnn|-gpu\b|vllm"
    )

    def scan(self, source: SourceFile) -> list[Finding]:
        name = source.display.rsplit("/", 1)[-1].lower()
        if name == "pyproject.toml":
            return list(self._pyproject(source))
        if name == "setup.cfg":
            return list(self._setup_cfg(source))
        if name.endswith((".yml", ".yaml")):
            return list(self._conda(source))
        if name == "pipfile":
            return list(self._pipfile(source))
        return list(self._requirements(source))

    def _requirements(self, source: SourceFile) -> Iterator[Finding]:
        for number, column, content in _logical_requirement_lines(source.text):
            if content.startswith(("-r", "-c", "--requirement", "--constraint", "-e ", "--editable")):
                continue
            if not content.startswith("-"):
                content = re.split(r"\s+--?[a-z]", content, maxsplit=1)[0]  # per-requirement options (--hash=...)
            span = Span(number, column, column + len(content))
            yield from requirement_findings(content, source.display, span, source.snippet(number))

    def _locate(self, source: SourceFile, needle: str, start_line: int = 1) -> Span:
        for number in range(start_line, len(source.lines) + 1):
            index = source.lines[number - 1].find(needle)
            if index >= 0:
                return Span(number, index + 1, index + 1 + len(needle))
        return Span(start_line, 1, 1)

    def _toml_requirements(self, source: SourceFile, requirements) -> Iterator[Finding]:
        if not isinstance(requirements, list):
            return
        for requirement in requirements:
            if isinstance(requirement, str):
                span = self._locate(source, requirement)
                yield from requirement_findings(requirement, source.display, span, source.snippet(span.line))

    def _pyproject(self, source: SourceFile) -> Iterator[Finding]:
        try:
            data = tomllib.loads(source.text)
        except tomllib.TOMLDecodeError as exc:
            raise ScanSkipped(f"not valid TOML ({exc})") from None
        project = data.get("project", {})
        yield from self._toml_requirements(source, project.get("dependencies"))
        for group in (project.get("optional-dependencies") or {}).values():
            yield from self._toml_requirements(source, group)
        for group in (data.get("dependency-groups") or {}).values():
            yield from self._toml_requirements(source, group)
        yield from self._toml_requirements(source, data.get("build-system", {}).get("requires"))
        # Package indexes: [[tool.uv.index]] url, [[tool.poetry.source]] url, [tool.pdm] sources.
        tool = data.get("tool", {})
        indexes = []
        for table in (tool.get("uv", {}).get("index", []), tool.get("poetry", {}).get("source", []), tool.get("pdm", {}).get("source", [])):
            if isinstance(table, list):
                indexes.extend(t.get("url", "") for t in table if isinstance(t, dict))
        for url in indexes:
            if isinstance(url, str) and _CUDA_INDEX.search(url):
                span = self._locate(source, url)
                location = Location(source.display, span.line, span.column, span.line, span.end_column)
                yield make_finding("AP8103", symbol=url, location=location, snippet=source.snippet(span.line), message=f"CUDA package index {url}", backends=_wheel_backends())

    def _pipfile(self, source: SourceFile) -> Iterator[Finding]:
        try:
            data = tomllib.loads(source.text)
        except tomllib.TOMLDecodeError as exc:
            raise ScanSkipped(f"not valid TOML ({exc})") from None
        for section in ("packages", "dev-packages"):
            for name, spec in (data.get(section) or {}).items():
                version = spec if isinstance(spec, str) and spec != "*" else ""
                requirement = f"{name}{version}" if version[:1] in "=<>!~" else name
                span = self._locate(source, name)
                yield from requirement_findings(requirement, source.display, span, source.snippet(span.line))

    def _setup_cfg(self, source: SourceFile) -> Iterator[Finding]:
        parser = configparser.ConfigParser(interpolation=None)
        try:
            parser.read_string(source.text)
        except configparser.Error as exc:
            raise ScanSkipped(f"not a valid setup.cfg ({exc.__class__.__name__}: {exc})") from None
        values = []
        if parser.has_option("options", "install_requires"):
            values.append(parser.get("options", "install_requires"))
        if parser.has_section("options.extras_require"):
            values.extend(value for _key, value in parser.items("options.extras_require"))
        for value in values:
            for line in value.splitlines():
                requirement = line.split("#", 1)[0].strip().rstrip(",")
                if requirement:
                    span = self._locate(source, requirement)
                    yield from requirement_findings(requirement, source.display, span, source.snippet(span.line))

    def _conda(self, source: SourceFile) -> Iterator[Finding]:
        import yaml

        try:
            root = yaml.compose(source.text, Loader=yaml.SafeLoader)
        except yaml.YAMLError as exc:
            raise ScanSkipped(f"not valid YAML ({' '.join(str(exc).split())})") from None
        if not isinstance(root, yaml.MappingNode):
            return
        for key, value in root.value:
            if not isinstance(key, yaml.ScalarNode):
                continue
            if key.value == "channels" and isinstance(value, yaml.SequenceNode):
                for item in value.value:
                    if isinstance(item, yaml.ScalarNode) and item.value.strip().lower() in ("nvidia", "nvidia/label/cuda"):
                        yield self._conda_finding(source, item, item.value, "the nvidia conda channel serves the CUDA toolkit")
            if key.value != "dependencies" or not isinstance(value, yaml.SequenceNode):
                continue
            for item in value.value:
                if isinstance(item, yaml.ScalarNode):
                    yield from self._conda_dependency(source, item)
                elif isinstance(item, yaml.MappingNode):
                    for sub_key, sub_value in item.value:
                        if getattr(sub_key, "value", None) == "pip" and isinstance(sub_value, yaml.SequenceNode):
                            for pip_item in sub_value.value:
                                if isinstance(pip_item, yaml.ScalarNode):
                                    line = pip_item.start_mark.line + 1
                                    span = Span(line, pip_item.start_mark.column + 1, pip_item.end_mark.column + 1)
                                    yield from requirement_findings(str(pip_item.value), source.display, span, source.snippet(line))

    def _conda_dependency(self, source: SourceFile, item) -> Iterator[Finding]:
        spec = str(item.value).strip()
        name = re.split(r"[=<>!~\s\[]", spec.split("::")[-1], maxsplit=1)[0].lower()
        build = spec.split("=")[2] if spec.count("=") >= 2 and "==" not in spec else ""
        if _CONDA_CUDA.fullmatch(name) and name != "cupy":
            yield self._conda_finding(source, item, spec, f"conda package {spec} is the CUDA toolkit, a CUDA library or a CUDA PyTorch build")
        elif name in ("pytorch", "torchvision", "torchaudio") and "cuda" in build.lower():
            yield self._conda_finding(source, item, spec, f"{spec} selects a CUDA build string")
        else:
            line = item.start_mark.line + 1
            span = Span(line, item.start_mark.column + 1, item.end_mark.column + 1)
            pep508 = name + "".join(spec[len(name):].split()) if not build else name
            yield from requirement_findings(pep508.replace("=", "==") if re.fullmatch(r"[\w.-]+=[\w.*]+", pep508) else pep508, source.display, span, source.snippet(line))

    def _conda_finding(self, source: SourceFile, node, symbol: str, message: str) -> Finding:
        line = node.start_mark.line + 1
        location = Location(source.display, line, node.start_mark.column + 1, node.end_mark.line + 1, node.end_mark.column + 1)
        return make_finding("AP6107", symbol=symbol, location=location, snippet=source.snippet(line), message=message, backends=_wheel_backends())
