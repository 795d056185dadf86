"""Build files: CMake, Makefiles, Dockerfiles, and the nvcc flags / arch lists of setup.py.

Each format has its own small lexer (CMake's command grammar with bracket and
quoted arguments; Make and Dockerfile logical lines split into shell words with
shlex), so a CUDA word in a comment or in free text is not a finding.
"""

from __future__ import annotations

import ast
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass

from accelport.findings import BackendStatus, Finding, Location
from accelport.inventory.base import (
    FileScanner,
    ScanSkipped,
    SourceFile,
    backend_statuses,
    make_finding,
)
from accelport.inventory.manifests import Span, requirement_findings

_ARCH_FLAG = re.compile(
    r"(?:-gencode|--generate-code|-arch|--gpu-architecture|-code|--gpu-code)(?:[= ].*)?|arch=(?:compute|sm)_\d+.*|(?:sm|compute)_\d+[a-z]?"
)
_NVCC_FLAG = re.compile(
    r"--use_fast_math|-use_fast_math|--expt-relaxed-constexpr|--expt-extended-lambda|-Xcompiler.*|-Xptxas.*|--ptxas-options.*"
    r"|-rdc=true|--relocatable-device-code.*|--extended-lambda|-lineinfo|--maxrregcount.*|-maxrregcount.*|--ftz.*|--prec-div.*"
    r"|--threads.*|-t\d+|--default-stream.*|-U__CUDA_NO_\w+|-D__CUDA_NO_\w+"
)
_CUDA_LIB_FLAG = re.compile(r"-l(?::lib)?(?:cudart|cuda|cublas|cublasLt|cudnn|nccl|cufft|curand|cusolver|cusparse|nvrtc|nvToolsExt|cupti)\b.*")
_CUDA_ENV = frozenset({"CUDA_HOME", "CUDA_PATH", "CUDA_ROOT", "CUDACXX", "CUDA_TOOLKIT_ROOT_DIR", "CUDAToolkit_ROOT", "NVCC_FLAGS", "NVCC_APPEND_FLAGS", "NVCC_PREPEND_FLAGS"})
_APT_CUDA = re.compile(r"cuda(?:-[\w.-]+)?|libcudnn\w*(?:-dev)?|libnccl\w*(?:-dev)?|libcublas\S*|libcusparse\S*|libcufft\S*|libcurand\S*|libcusolver\S*|nvidia-cuda-toolkit")


def _build_backends() -> dict[str, BackendStatus]:
    return backend_statuses(cuda_like=BackendStatus.PORTABLE, others=BackendStatus.ALTERNATIVE)


def _loc(display: str, line: int, column: int, end_column: int) -> Location:
    return Location(display, line, column, line, max(end_column, column))


# --------------------------------------------------------------------------- CMake


@dataclass(frozen=True, slots=True)
class CMakeArgument:
    text: str
    line: int
    column: int
    quoted: bool


@dataclass(frozen=True, slots=True)
class CMakeCommand:
    name: str  # lower-cased
    line: int
    column: int
    arguments: tuple[CMakeArgument, ...]


_BRACKET_OPEN = re.compile(r"\[(=*)\[")


def cmake_commands(text: str) -> list[CMakeCommand]:
    """Command invocations of a CMake file, per the CMake language grammar (comments dropped)."""
    commands: list[CMakeCommand] = []
    i = 0
    n = len(text)
    line = 1
    line_start = 0

    def advance(to: int) -> None:
        nonlocal i, line, line_start
        chunk = text[i:to]
        newlines = chunk.count("\n")
        if newlines:
            line += newlines
            line_start = i + chunk.rfind("\n") + 1
        i = to

    def skip_bracket(start: int) -> int | None:
        match = _BRACKET_OPEN.match(text, start)
        if not match:
            return None
        close = text.find("]" + match.group(1) + "]", match.end())
        return n if close < 0 else close + len(match.group(1)) + 2

    while i < n:
        ch = text[i]
        if ch == "#":
            end = skip_bracket(i + 1)
            if end is None:
                end = text.find("\n", i)
                end = n if end < 0 else end
            advance(end)
            continue
        if ch.isalpha() or ch == "_":
            match = re.compile(r"[A-Za-z_][A-Za-z0-9_]*").match(text, i)
            name = match.group()
            cmd_line, cmd_col = line, i - line_start + 1
            advance(match.end())
            while i < n and text[i] in " \t":
                advance(i + 1)
            if i >= n or text[i] != "(":
                continue
            advance(i + 1)
            arguments: list[CMakeArgument] = []
            depth = 1
            while i < n and depth:
                ch = text[i]
                if ch in " \t\r\n":
                    advance(i + 1)
                elif ch == "#":
                    end = skip_bracket(i + 1)
                    if end is None:
                        end = text.find("\n", i)
                        end = n if end < 0 else end
                    advance(end)
                elif ch == "(":
                    depth += 1
                    advance(i + 1)
                elif ch == ")":
                    depth -= 1
                    advance(i + 1)
                elif ch == '"':
                    start_line, start_col = line, i - line_start + 1
                    j = i + 1
                    while j < n and text[j] != '"':
                        j += 2 if text[j] == "\\" else 1
                    arguments.append(CMakeArgument(text[i + 1 : j], start_line, start_col, True))
                    advance(min(j + 1, n))
                elif ch == "[" and _BRACKET_OPEN.match(text, i):
                    start_line, start_col = line, i - line_start + 1
                    end = skip_bracket(i)
                    opener = _BRACKET_OPEN.match(text, i)
                    arguments.append(CMakeArgument(text[opener.end() : max(end - len(opener.group(1)) - 2, opener.end())], start_line, start_col, True))
                    advance(end)
                else:
                    start_line, start_col = line, i - line_start + 1
                    j = i
                    while j < n and text[j] not in ' \t\r\n()#"':
                        j += 2 if text[j] == "\\" else 1
                    arguments.append(CMakeArgument(text[i:j], start_line, start_col, False))
                    advance(min(j, n))
            commands.append(CMakeCommand(name.lower(), cmd_line, cmd_col, tuple(arguments)))
            continue
        advance(i + 1)
    return commands


_CMAKE_FIND = re.compile(r"CUDA|CUDAToolkit|CUDNN|cuDNN|NCCL|Thrust|CUB|CUTLASS|NvidiaCutlass|CUTENSOR|cuTENSOR|TensorRT|NVTX", re.IGNORECASE)
_CMAKE_ARCH_VARS = frozenset({"CMAKE_CUDA_ARCHITECTURES", "CUDA_ARCHITECTURES", "TORCH_CUDA_ARCH_LIST", "CUDA_ARCH_LIST", "CMAKE_CUDA_ARCHS"})
_CMAKE_FLAG_VARS = frozenset({"CMAKE_CUDA_FLAGS", "CUDA_NVCC_FLAGS", "CMAKE_CUDA_FLAGS_RELEASE", "CMAKE_CUDA_FLAGS_DEBUG", "CMAKE_CUDA_STANDARD", "CMAKE_CUDA_COMPILER", "CMAKE_CUDA_SEPARABLE_COMPILATION", "CUDA_SEPARABLE_COMPILATION", "CUDA_RESOLVE_DEVICE_SYMBOLS"})
_CMAKE_CUDA_LIBS = re.compile(r"CUDA::\w+|cudart(?:_static)?|cublas(?:Lt)?|cudnn|nccl|cufft|curand|cusolver|cusparse|nvrtc|nvToolsExt|\$\{CUDA_\w*LIBRAR\w*\}|\$\{CUDNN_\w*\}|\$\{NCCL_\w*\}")


def _cmake_findings(source: SourceFile) -> Iterator[Finding]:
    display = source.display
    snippet = source.snippet
    backends = _build_backends()

    def finding(rule: str, arg_or_cmd, symbol: str, message: str | None = None) -> Finding:
        return make_finding(
            rule,
            symbol=symbol,
            location=_loc(display, arg_or_cmd.line, arg_or_cmd.column, arg_or_cmd.column + len(symbol)),
            snippet=snippet(arg_or_cmd.line),
            message=message,
            backends=backends,
        )

    for command in cmake_commands(source.text):
        args = command.arguments
        texts = [a.text for a in args]
        name = command.name
        if name == "project" and any(t == "CUDA" for t in texts[1:]):
            yield finding("AP6101", command, "project(... CUDA)", "the project enables the CUDA language")
        elif name in ("enable_language", "check_language") and "CUDA" in texts:
            yield finding("AP6101", command, f"{name}(CUDA)")
        elif name in ("cuda_add_library", "cuda_add_executable", "cuda_compile", "cuda_wrap_srcs", "cuda_add_cublas_to_target"):
            yield finding("AP6101", command, name, f"{name}(): legacy FindCUDA build of CUDA sources")
        elif name == "find_package" and args and _CMAKE_FIND.fullmatch(args[0].text):
            yield finding("AP6102", args[0], f"find_package({args[0].text})")
        elif name in ("set", "list", "string") and args:
            variable = args[1].text if name in ("list", "string") and len(args) > 1 else args[0].text
            if variable in _CMAKE_ARCH_VARS:
                values = " ".join(t for t in texts[1:] if t not in ("CACHE", "STRING", "FORCE", "APPEND") and not t.startswith("Set "))
                yield finding("AP6103", command, variable, f"{variable} pins NVIDIA architectures: {values}".strip())
            elif variable in _CMAKE_FLAG_VARS:
                yield finding("AP6104", command, variable, f"{variable}: nvcc settings")
            elif variable in _CUDA_ENV:
                yield finding("AP6108", command, variable)
        elif name in ("set_property", "set_target_properties", "set_source_files_properties") and any(t in ("CUDA_ARCHITECTURES", "CUDA_SEPARABLE_COMPILATION", "CUDA_RESOLVE_DEVICE_SYMBOLS", "CUDA_STANDARD") for t in texts):
            prop = next(t for t in texts if t.startswith("CUDA_"))
            yield finding("AP6103" if prop == "CUDA_ARCHITECTURES" else "AP6104", command, prop)
        for arg in args:
            text = arg.text
            if name in ("target_link_libraries", "link_libraries", "target_link_options") and _CMAKE_CUDA_LIBS.fullmatch(text):
                yield finding("AP6102", arg, text, f"links the CUDA library {text}")
            elif "$<COMPILE_LANGUAGE:CUDA>" in text or "$<$<COMPILE_LANGUAGE:CUDA>" in text:
                yield finding("AP6104", arg, text, "compile options for CUDA sources (nvcc)")
            elif name not in ("set", "list", "string", "message") and _ARCH_FLAG.fullmatch(text) and ("sm_" in text or "compute_" in text or text.startswith("-gencode")):
                yield finding("AP6103", arg, text)
            elif name not in ("message",) and _NVCC_FLAG.fullmatch(text):
                yield finding("AP6104", arg, text)
            elif "$ENV{" in text and any(f"$ENV{{{var}}}" in text for var in _CUDA_ENV):
                yield finding("AP6108", arg, text)


# --------------------------------------------------------------------------- Make and Docker


def _logical_lines(text: str, comment_prefix: str = "#") -> Iterator[tuple[int, str]]:
    """(first line number, joined content) for lines continued with a trailing backslash."""
    pending: list[str] = []
    first = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        if not pending:
            first = number
            if raw.lstrip().startswith(comment_prefix):
                continue
        if raw.endswith("\\"):
            pending.append(raw[:-1])
            continue
        pending.append(raw)
        yield first, " ".join(pending)
        pending = []
    if pending:
        yield first, " ".join(pending)


def _words(text: str) -> list[str]:
    try:
        return shlex.split(text, comments=True, posix=True)
    except ValueError:  # an unbalanced quote: fall back to whitespace words
        return text.split("#", 1)[0].split()


def _shell_findings(words: list[str], display: str, line: int, text: str, snippet: str) -> Iterator[Finding]:
    """nvcc invocations, arch and nvcc flags, CUDA link flags, CUDA apt packages, pip installs of CUDA wheels."""
    backends = _build_backends()

    def at(word: str) -> Location:
        column = text.find(word) + 1 if word in text else 1
        return _loc(display, line, column, column + len(word))

    def build(rule: str, word: str, message: str | None = None) -> Finding:
        return make_finding(rule, symbol=word, location=at(word), snippet=snippet, message=message, backends=backends)

    seen_nvcc = False
    for index, word in enumerate(words):
        base = word.rsplit("/", 1)[-1]
        if not seen_nvcc and (base == "nvcc" or word in ("$(NVCC)", "${NVCC}", "$NVCC")):
            seen_nvcc = True
            yield build("AP6105", word, "nvcc is invoked")
        elif _ARCH_FLAG.fullmatch(word) and ("sm_" in word or "compute_" in word or word in ("-gencode", "-arch", "--gpu-architecture")):
            target = words[index + 1] if word in ("-gencode", "-arch", "--gpu-architecture") and index + 1 < len(words) else ""
            yield build("AP6103", word, f"NVIDIA architecture flag {word} {target}".strip())
        elif _NVCC_FLAG.fullmatch(word):
            yield build("AP6104", word)
        elif _CUDA_LIB_FLAG.fullmatch(word):
            yield build("AP6105", word, f"links the CUDA library {word}")
    if len(words) > 2 and words[0] in ("apt-get", "apt", "yum", "dnf") and "install" in words:
        for word in words:
            if _APT_CUDA.fullmatch(word.split("=")[0]) and word not in ("install",):
                yield build("AP6107", word, f"system package {word} installs CUDA")
    for index, word in enumerate(words):
        if (word == "install" and index > 0 and words[index - 1] in ("pip", "pip3", "-m pip")) or (word == "install" and index > 1 and words[index - 2:index] == ["-m", "pip"]):
            yield from _pip_install_findings(words[index + 1 :], display, line, text, snippet)
            break


def _pip_install_findings(args: list[str], display: str, line: int, text: str, snippet: str) -> Iterator[Finding]:
    index = 0
    while index < len(args):
        arg = args[index]
        if arg in ("&&", ";", "||", "|"):
            return
        column = text.find(arg) + 1 if arg in text else 1
        span = Span(line, column, column + len(arg))
        if arg in ("-i", "--index-url", "--extra-index-url", "-f", "--find-links") and index + 1 < len(args):
            yield from requirement_findings(f"{arg} {args[index + 1]}", display, span, snippet)
            index += 2
            continue
        if (arg.startswith("--") and "=" in arg) or not arg.startswith("-"):
            yield from requirement_findings(arg, display, span, snippet)
        index += 1


def _makefile_findings(source: SourceFile) -> Iterator[Finding]:
    for line, content in _logical_lines(source.text):
        stripped = content.strip()
        if not stripped:
            continue
        assignment = re.match(r"(?:export\s+|override\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*(?:\?|:|::|\+|!)?=\s*(.*)", stripped)
        if assignment and assignment.group(1) in _CUDA_ENV:
            name = assignment.group(1)
            column = content.find(name) + 1
            yield make_finding("AP6108", symbol=name, location=_loc(source.display, line, column, column + len(name)), snippet=source.snippet(line), backends=_build_backends())
        words = _words(assignment.group(2) if assignment else stripped)
        yield from _shell_findings(words, source.display, line, content, source.snippet(line))


def _dockerfile_findings(source: SourceFile) -> Iterator[Finding]:
    for line, content in _logical_lines(source.text):
        stripped = content.strip()
        if not stripped:
            continue
        instruction, _, rest = stripped.partition(" ")
        instruction = instruction.upper()
        rest = rest.strip()
        if instruction == "FROM":
            words = [w for w in rest.split() if not w.startswith("--")]
            image = words[0] if words else ""
            lower = image.lower()
            if lower.startswith(("nvidia/cuda", "nvcr.io/nvidia/", "docker.io/nvidia/cuda")) or re.search(r"[:-]cuda\d|cudnn|-cu\d{2,3}\b", lower.split(":", 1)[-1] if ":" in lower else ""):
                column = content.find(image) + 1
                yield make_finding(
                    "AP6106",
                    symbol=image,
                    location=_loc(source.display, line, column, column + len(image)),
                    snippet=source.snippet(line),
                    message=f"base image {image} carries the CUDA stack",
                    backends=_build_backends(),
                )
        elif instruction in ("ENV", "ARG"):
            for word in _words(rest):
                name, _, value = word.partition("=")
                column = content.find(name) + 1
                location = _loc(source.display, line, column, column + len(word))
                if name in _CUDA_ENV:
                    yield make_finding("AP6108", symbol=name, location=location, snippet=source.snippet(line), backends=_build_backends())
                elif name in _CMAKE_ARCH_VARS:
                    yield make_finding("AP6103", symbol=name, location=location, snippet=source.snippet(line), message=f"{name}={value} pins NVIDIA architectures", backends=_build_backends())
        elif instruction == "RUN":
            for segment in re.split(r"&&|;|\|\|", rest):
                yield from _shell_findings(_words(segment), source.display, line, content, source.snippet(line))


class BuildFileScanner(FileScanner):
    """CMakeLists.txt / *.cmake, Makefiles, Dockerfiles."""

    name = "build"
    filenames = ("CMakeLists.txt", "Makefile", "makefile", "GNUmakefile", "Dockerfile", "Containerfile")
    suffixes = (".cmake", ".mk", ".mak", ".dockerfile")
    filename_patterns = (r"(?:Dockerfile|Containerfile)[.-][\w.-]+", r"Makefile[.-][\w.-]+")
    prefilter = re.compile(rb"(?i)cuda|nvcc|nvidia|cudnn|nccl|cublas|sm_\d|compute_\d|gencode|cutlass|thrust|TORCH_CUDA_ARCH_LIST|-lcu")

    def scan(self, source: SourceFile) -> list[Finding]:
        name = source.display.rsplit("/", 1)[-1]
        lower = name.lower()
        if name == "CMakeLists.txt" or lower.endswith(".cmake"):
            return list(_cmake_findings(source))
        if "dockerfile" in lower or "containerfile" in lower:
            return list(_dockerfile_findings(source))
        return list(_makefile_findings(source))


# --------------------------------------------------------------------------- setup.py


class SetupScriptScanner(FileScanner):
    """setup.py: everything the Python scanner reports, plus nvcc flags and architecture lists.

    setup.py is Python, so the Python scanner's findings (CUDAExtension, CUDA_HOME ...)
    come first; this scanner adds what only a build-file reading sees.
    """

    name = "setup.py"
    filenames = ("setup.py",)

    def wants(self, data: bytes) -> bool:
        return True  # the Python scanner's own pre-filter runs inside scan()

    def scan(self, source: SourceFile) -> list[Finding]:
        from accelport.inventory.python import PythonScanner
        from accelport.source.markers import MARKER_WORD, acknowledge

        python = PythonScanner()
        findings = python.scan(source) if python.wants(source.data) else []
        try:
            tree = ast.parse(source.text, filename=source.display)
        except SyntaxError as exc:
            raise ScanSkipped(f"Python syntax error at line {exc.lineno}: {exc.msg}") from None
        findings.extend(_setup_findings(tree, source))
        if MARKER_WORD in source.data:  # `# accelport: APxxxx` markers acknowledge build findings too
            findings = acknowledge(findings, source.lines)
        return findings


def _string_elements(node) -> Iterator[ast.Constant]:
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        for element in node.elts:
            yield from _string_elements(element)
    elif isinstance(node, ast.BinOp):
        yield from _string_elements(node.left)
        yield from _string_elements(node.right)
    elif isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node


def _setup_findings(tree: ast.AST, source: SourceFile) -> Iterator[Finding]:
    backends = _build_backends()

    def at(node: ast.AST) -> Location:
        return Location(source.display, node.lineno, node.col_offset + 1, node.end_lineno or node.lineno, (node.end_col_offset or node.col_offset) + 1)

    for node in ast.walk(tree):
        # extra_compile_args={"nvcc": [...]} (also `dict(nvcc=[...])`)
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=False):
                if isinstance(key, ast.Constant) and key.value == "nvcc":
                    yield from _nvcc_list(value, source, at, backends)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict":
            for keyword in node.keywords:
                if keyword.arg == "nvcc":
                    yield from _nvcc_list(keyword.value, source, at, backends)
        # Extension(..., libraries=["cublas"], extra_link_args=["-lcudnn"])
        if isinstance(node, ast.Call):
            for keyword in node.keywords:
                if keyword.arg in ("libraries", "extra_link_args"):
                    yield from _linked_libraries(keyword, source, at, backends)
        # os.environ["TORCH_CUDA_ARCH_LIST"] = "..."; os.environ.setdefault("TORCH_CUDA_ARCH_LIST", ...)
        if isinstance(node, ast.Constant) and node.value == "TORCH_CUDA_ARCH_LIST":
            yield make_finding("AP6103", symbol="TORCH_CUDA_ARCH_LIST", location=at(node), snippet=source.snippet(node.lineno), message="TORCH_CUDA_ARCH_LIST pins NVIDIA architectures for the extension build", backends=backends)


def _nvcc_list(value: ast.AST, source: SourceFile, at, backends) -> Iterator[Finding]:
    flags = list(_string_elements(value))
    listed = " ".join(f.value for f in flags)
    yield make_finding(
        "AP6104",
        symbol="extra_compile_args['nvcc']",
        location=at(value),
        snippet=source.snippet(value.lineno),
        message=f"nvcc-only compile flags: {listed}" if listed else "nvcc-only compile flags",
        backends=backends,
    )
    for element in flags:
        flag = element.value
        if _ARCH_FLAG.fullmatch(flag) and ("sm_" in flag or "compute_" in flag or flag.startswith("-gencode")):
            yield make_finding("AP6103", symbol=flag, location=at(element), snippet=source.snippet(element.lineno), message=f"nvcc architecture flag {flag}", backends=backends)


_LINK_FLAG = re.compile(r"-l(:?)(\S+)")


def _linked_libraries(keyword: ast.keyword, source: SourceFile, at, backends) -> Iterator[Finding]:
    """`libraries=["cublas"]` / `extra_link_args=["-lcublas", "-l:libcudart.so.12"]` naming NVIDIA libraries."""
    from accelport.inventory.cuda_api import catalogue

    cat = catalogue()
    for element in _string_elements(keyword.value):
        for word in element.value.split() if keyword.arg == "extra_link_args" else [element.value]:
            if keyword.arg == "extra_link_args":
                match = _LINK_FLAG.fullmatch(word)
                if match is None:
                    continue
                exact, name = match.groups()
                soname = name if exact else f"lib{name}.so"
            else:
                name = word.strip()
                soname = name if name.startswith("lib") and ".so" in name else f"lib{name}.so"
            family = cat.library_family(soname)
            if family is None:
                continue
            yield make_finding(
                "AP6105",
                symbol=name,
                location=at(element),
                snippet=source.snippet(element.lineno),
                message=f"the extension links the {family.title} library {name} ({keyword.arg})",
                backends=backends,
            )
