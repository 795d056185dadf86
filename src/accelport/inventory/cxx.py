"""C/C++/CUDA scanner: tree-sitter's CUDA grammar decides what is code, the CUDA API catalogue classifies it.

One parse per file. Identifiers are found through a byte-level word index and
confirmed against the syntax tree, so a CUDA name inside a comment, a string or
an `#include` path is never reported as a call. Kernels, launches, inline PTX,
registrations and the warp-size hazards come from tree queries.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections import Counter
from dataclasses import dataclass, field, replace
from functools import cache
from typing import Any

from accelport import knowledge
from accelport.findings import BackendStatus, Category, Finding, Location
from accelport.inventory.base import (
    FileScanner,
    ScanSkipped,
    SourceFile,
    backend_statuses,
    make_finding,
)
from accelport.inventory.cuda_api import ApiEntry, Catalogue, catalogue, rule_for_family
from accelport.inventory.kernel_equivalents import (
    equivalent_for_kernel,
    equivalent_for_library_call,
)

# A file this broken is not C/C++/CUDA (or not parseable without its macros).
MAX_ERROR_SHARE = 0.5

_IDENT_TYPES = frozenset({"identifier", "type_identifier", "field_identifier", "namespace_identifier"})
_WORD = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")

_WARP = re.compile(
    r"__(?:shfl(?:_up|_down|_xor)?(?:_sync)?|ballot(?:_sync)?|activemask|syncwarp|any(?:_sync)?|all(?:_sync)?"
    r"|match_(?:any|all)_sync|reduce_(?:add|min|max|and|or|xor)_sync)"
)
_ATOMIC = re.compile(r"atomic(?:Add|Sub|Exch|Min|Max|Inc|Dec|CAS|And|Or|Xor)(?:_system|_block)?")
_TEXTURE = re.compile(r"(?:tex|surf)(?:1D|2D|3D|Cubemap)\w*|cuda(?:Texture|Surface)Object_t|texture|surface")
_ARCH_GUARDS = frozenset(
    {
        "__CUDA_ARCH__",
        "__CUDACC__",
        "__CUDACC_RTC__",
        "__NVCC__",
        "__CUDACC_VER_MAJOR__",
        "__CUDACC_VER_MINOR__",
        "CUDART_VERSION",
        "CUDA_VERSION",
        "__CUDA_ARCH_FEAT_SM90_ALL",
        "__CUDA_ARCH_LIST__",
    }
)
_LAUNCH_APIS = frozenset(
    {
        "cudaLaunchKernel",
        "cudaLaunchKernelExC",
        "cudaLaunchKernelEx",
        "cudaLaunchCooperativeKernel",
        "cudaLaunchCooperativeKernelMultiDevice",
        "cuLaunchKernel",
        "cuLaunchKernelEx",
        "cuLaunchCooperativeKernel",
        "cuLaunchCooperativeKernelMultiDevice",
    }
)
_MANAGED = frozenset({"cudaMallocManaged", "cuMemAllocManaged", "__managed__"})
_REGISTRATIONS = frozenset({"TORCH_LIBRARY", "TORCH_LIBRARY_IMPL", "TORCH_LIBRARY_FRAGMENT", "PYBIND11_MODULE"})
_CUDA_DEVICE_CHECKS = frozenset({"is_cuda", "kCUDA"})
_FULL_MASKS = frozenset({"0xffffffff", "0xffffffffu", "0xffffffffull", "~0u", "0xffffffffffffffff"})
_WARP_SIZE_NAME = re.compile(r"(?i)k?_?warp_?size")

# Library family -> rule.
_HEADER_RULES = {
    Category.FRAMEWORK_API: "AP1910",
    Category.RUNTIME_API: "AP2010",
    Category.DRIVER_API: "AP3010",
    Category.LIBRARY_CALL: "AP4010",
    Category.KERNEL: "AP5010",
}

_QUERY_SOURCE = """
(function_definition) @function
(call_expression arguments: (argument_list) @args) @call
(kernel_call_syntax) @launch
(gnu_asm_expression) @asm
(preproc_include path: (_) @include)
(binary_expression right: (number_literal) @number) @binary
(primitive_type) @primitive
(preproc_def name: (identifier) @define_name value: (preproc_arg) @define_value)
(init_declarator declarator: (identifier) @const_name value: (number_literal) @const_value)
(preproc_arg) @macro_body
(launch_bounds) @launch_bounds
(for_statement) @for_loop
(ERROR) @error
"""


@cache
def _language():
    import tree_sitter_cuda
    from tree_sitter import Language, Parser, Query

    language = Language(tree_sitter_cuda.language())
    return Parser(language), Query(language, _QUERY_SOURCE)


@dataclass(frozen=True, slots=True)
class DeviceFunction:
    """A `__global__` or `__device__` function: where its body is and how big it is."""

    name: str
    start: int
    end: int
    line: int
    lines: int
    kernel: bool
    node: Any = field(default=None, compare=False, repr=False)  # the function_definition


class _Positions:
    """Byte offset -> (line, column) with 1-based, character-counted columns."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.starts = [0]
        self.starts.extend(m.end() for m in re.finditer(rb"\n", data))

    def at(self, offset: int) -> tuple[int, int]:
        index = bisect_right(self.starts, offset) - 1
        start = self.starts[index]
        prefix = self.data[start:offset]
        column = len(prefix.decode("utf-8", errors="replace")) if not prefix.isascii() else len(prefix)
        return index + 1, column + 1


class CxxScanner(FileScanner):
    """C, C++ and CUDA sources and headers."""

    name = "cxx"
    suffixes = (".cu", ".cuh", ".c", ".cc", ".cpp", ".cxx", ".c++", ".h", ".hh", ".hpp", ".hxx", ".inl", ".ipp", ".tcc", ".cu.inc")
    prefilter = re.compile(
        rb"cuda|CUDA|cu[A-Z]|CU_|cublas|CUBLAS|cudnn|CUDNN|cufft|curand|cusolver|cusparse|cub::|nccl|NCCL|nvtx|NVTX"
        rb"|thrust|cute::|cutlass|CUTLASS|cutensor|cupti|__global__|__device__|__managed__|<<<|\basm\b|__asm__"
        rb"|TORCH_LIBRARY|PYBIND11_MODULE|__shfl|__ballot|__activemask|__syncwarp|atomic[A-Z]|wmma|cooperative_groups"
        rb"|(?i:warp_?size)|__nv_|__ldg|\btex[123]D|\bsurf[123]D|nvrtc|NVRTC|cuComplex|cuFloatComplex|cuDoubleComplex"
    )

    def wants(self, data: bytes) -> bool:
        if super().wants(data):
            return True
        extra = catalogue().user_prefilter
        return extra is not None and extra.search(data) is not None

    def scan(self, source: SourceFile) -> list[Finding]:
        return _FileScan(source, catalogue()).run()


class _FileScan:
    """The state of scanning one file."""

    def __init__(self, source: SourceFile, cat: Catalogue, data: bytes | None = None) -> None:
        self.source = source
        # `data` is a same-length variant of the file (inactive #if branches blanked).
        self.data = source.text.encode("utf-8") if data is None else data
        self.cat = cat
        self.pos = _Positions(self.data)
        self.findings: list[Finding] = []
        self.reported_spans: set[tuple[int, str]] = set()
        self.type_uses: Counter[str] = Counter()
        self.first_type_finding: dict[str, int] = {}
        self.cuda_source = source.display.lower().endswith((".cu", ".cuh"))

    # ------------------------------------------------------------------ helpers

    def location(self, start: int, end: int) -> Location:
        line, column = self.pos.at(start)
        end_line, end_column = self.pos.at(end)
        return Location(self.source.display, line, column, end_line, end_column)

    def add(self, rule_id: str, node, symbol: str, **kwargs) -> Finding:
        """A finding at `node` (a tree-sitter node, or a (start, end) byte span)."""
        start, end = node if isinstance(node, tuple) else (node.start_byte, node.end_byte)
        location = self.location(start, end)
        family = kwargs.pop("family", None)
        finding = make_finding(rule_id, symbol=symbol, location=location, snippet=self.source.snippet(location.line), **kwargs)
        if family and family != finding.family:
            finding = replace(finding, family=family)
        if self.source.admit(finding):
            self.findings.append(finding)
        return finding

    def _device_context(self, node) -> bool:
        """CUDA source (.cu/.cuh) or inside a __global__/__device__ function."""
        return self.cuda_source or self.device_function_at(node.start_byte) is not None

    def device_function_at(self, offset: int) -> DeviceFunction | None:
        for function in self.device_functions:
            if function.start <= offset < function.end:
                return function
        return None

    # ------------------------------------------------------------------ the scan

    def run(self) -> list[Finding]:
        root, captures = _parse(self.data)
        share = self._error_share(captures.get("error", []))
        if share > MAX_ERROR_SHARE:
            # Often an #if/#else whose branches each open a brace the other closes:
            # scan each branch choice on its own rather than skip the file.
            findings = self._scan_branch_variants(root)
            if findings is not None:
                return findings
            raise ScanSkipped(
                f"not parseable as C/C++/CUDA: syntax errors cover {share:.0%} of the file; "
                "check that it is C/C++ source, or exclude it with --exclude"
            )
        return self._scan(root, captures)

    def _scan_branch_variants(self, root) -> list[Finding] | None:
        """Findings from every way of taking the file's #if branches, merged; None if none parses."""
        mask = _code_mask(root)
        groups, directives = _conditionals(self.data, mask)
        if not groups:
            return None
        merged: dict[tuple, Finding] = {}
        for variant in _branch_variants(self.data, groups, directives):
            sub = _FileScan(self.source, self.cat, variant)
            sub_root, sub_captures = _parse(variant)
            if sub._error_share(sub_captures.get("error", []), kept_only=True) > MAX_ERROR_SHARE:
                return None  # one branch choice is not C/C++ either: the file is skipped, not half-read
            for finding in sub._scan(sub_root, sub_captures):
                merged.setdefault(_finding_key(finding), finding)
        # The directives were blanked in every variant: their conditions are looked at here.
        for start, end, name in directives:
            if name not in _CONDITION_DIRECTIVES:
                continue
            for match in _WORD.finditer(self.data, start, end):
                word = match.group().decode("ascii")
                if word in _ARCH_GUARDS and not _masked(mask, match.start()):
                    finding = self.add("AP5009", match.span(), word)
                    merged.setdefault(_finding_key(finding), finding)
        return sorted(merged.values(), key=Finding.sort_key)

    def _scan(self, root, captures) -> list[Finding]:
        self.device_functions = self._device_functions(captures.get("function", []))
        launches = self._launches(captures.get("launch", []))
        launches.update(self._macro_launches(captures.get("macro_body", []), _macro_names(captures)))
        self._kernels(launches)
        self._identifiers(root, captures.get("macro_body", []))
        self._includes(captures.get("include", []))
        self._asm(captures.get("asm", []))
        self._lane_arithmetic(captures.get("binary", []))
        self._fp64(captures.get("primitive", []))
        self._warp_size_constants(captures)
        self._launch_bounds(captures.get("launch_bounds", []))
        self._warp_loops(captures.get("for_loop", []))
        self._registrations(captures.get("call", []))
        self._finish_type_counts()
        return sorted(self.findings, key=Finding.sort_key)

    def _error_share(self, errors, *, kept_only: bool = False) -> float:
        """The share of the file inside syntax errors; `kept_only`: of its non-blank bytes (for a variant)."""
        if not errors or not self.data:
            return 0.0
        spans = sorted((e.start_byte, e.end_byte) for e in errors)
        covered = 0
        reach = -1
        for start, end in spans:  # union of (possibly nested) error spans
            if end <= reach:
                continue
            start = max(start, reach)
            covered += _solid(self.data[start:end]) if kept_only else end - start
            reach = end
        total = _solid(self.data) if kept_only else len(self.data)
        return covered / total if total else 0.0

    def _device_functions(self, functions) -> list[DeviceFunction]:
        found = []
        for node in functions:
            qualifiers = {child.type for child in node.children[:6]}
            kernel = "__global__" in qualifiers
            if not kernel and "__device__" not in qualifiers:
                continue
            declarator = node.child_by_field_name("declarator")
            name = _declarator_name(declarator)
            body = node.child_by_field_name("body")
            if body is None:
                continue
            lines = node.end_point.row - node.start_point.row + 1
            found.append(DeviceFunction(name, node.start_byte, node.end_byte, node.start_point.row + 1, lines, kernel, node))
        return found

    def _launches(self, configs, shift: int = 0, where: str = "") -> Counter[str]:
        """AP5003 per `<<<...>>>` launch; `shift` maps nodes parsed from a macro body back into the file."""
        launches: Counter[str] = Counter()

        def span(node) -> tuple[int, int]:
            return node.start_byte + shift, node.end_byte + shift

        for config in configs:
            call = config.parent
            function = call.child_by_field_name("function") if call is not None else None
            # The symbol keeps template arguments (`k<T, 4>`): which instantiation is launched
            # matters to a port; launches are counted by the bare kernel name.
            name = _TEMPLATE_GAPS.sub(r"\1", _squash(function.text)) if function is not None else "?"
            launches[kernel_name(name)] += 1
            arguments = [c for c in config.named_children if c.type != "comment"]
            config_text = ", ".join(_squash(a.text) for a in arguments)
            self.add("AP5003", span(call), name, message=f"kernel launch {name}<<<{config_text}>>>{where}")
            if len(arguments) >= 2 and _squash(arguments[1].text) in {"32", "dim3(32)", "dim3(32, 1)", "dim3(32, 1, 1)"}:
                self.add("AP9103", span(arguments[1]), name, backends=_warp_backends())
            if self.device_function_at(call.start_byte + shift) is not None:
                self.add("AP9106", span(call), name, backends=_unsupported_off_cuda())
        return launches

    def _macro_launches(self, bodies, defines) -> Counter[str]:
        """Launches written inside `#define` bodies, which tree-sitter keeps as unparsed text.

        Each body holding `<<<` is parsed on its own as the body of a function, so a launch
        is found by the grammar (not by pattern) and a `<<<` in a string stays text.
        """
        launches: Counter[str] = Counter()
        names = {body.start_byte: name for name, body in defines}  # by position: nodes are not hashable keys
        for body in bodies:
            text = body.text
            if b"<<<" not in text:
                continue
            code = _CONTINUATION.sub(b" ", text)
            _root, captures = _parse(_MACRO_PREFIX + code + _MACRO_SUFFIX)
            configs = captures.get("launch", [])
            if not configs:
                continue
            macro = names.get(body.start_byte)
            where = f" in macro {macro}" if macro else " in a macro"
            launches.update(self._launches(configs, body.start_byte - len(_MACRO_PREFIX), where))
        return launches

    def _kernels(self, launches: Counter[str]) -> None:
        for function in self.device_functions:
            node = function.node
            if function.kernel:
                count = launches.get(kernel_name(function.name), 0)
                equivalent = equivalent_for_kernel(function.name)
                where = f"launched {count}× in this file" if count else "no launch in this file"
                message = f"CUDA kernel {function.name}: {function.lines} lines, {where}"
                effort = None
                if equivalent is not None:
                    message += f"; portable equivalent: {equivalent.replacement}"
                    effort = "medium"
                elif function.lines < 15:
                    effort = "medium"
                self.add(
                    "AP5001",
                    node,
                    function.name,
                    message=message,
                    replacement=equivalent.replacement if equivalent else None,
                    backends=_kernel_backends(),
                    effort=effort,
                )
            else:
                self.add(
                    "AP5002",
                    node,
                    function.name,
                    message=f"CUDA device function {function.name}: {function.lines} lines",
                    backends=_kernel_backends(),
                )

    # ------------------------------------------------------------------ identifiers

    def _identifiers(self, root, macro_bodies) -> None:
        words = {w.decode("ascii") for w in set(_WORD.findall(self.data))}
        wanted = {w for w in words if _interesting(self.cat, w)}
        if not wanted:
            return
        for start, word in _occurrences(self.data, wanted):
            end = start + len(word)
            node = root.descendant_for_byte_range(start, end)
            if node is None or node.start_byte != start or node.end_byte != end:
                continue  # inside a comment, string, number, macro body or a longer token
            if node.type in _IDENT_TYPES or node.type == "__managed__":
                self._identifier(node, word)
        # Macro bodies are not parsed by tree-sitter: look at their words separately.
        self._macro_bodies(macro_bodies, wanted)

    def _macro_bodies(self, bodies, wanted: set[str]) -> None:
        # preproc_arg nodes hold #define bodies verbatim (comments already split off).
        for body in bodies:
            text = body.text
            for match in _WORD.finditer(text):
                word = match.group().decode("ascii")
                if word not in wanted or _inside_quotes(text, match.start()):
                    continue
                entry = self.cat.lookup(word)
                if entry is not None:
                    span = (body.start_byte + match.start(), body.start_byte + match.end())
                    self._api(entry, span, word, call=text[match.end() : match.end() + 1] == b"(")

    def _identifier(self, node, word: str) -> None:
        outer = node
        while outer.parent is not None and outer.parent.type == "qualified_identifier":
            outer = outer.parent
        key = (outer.start_byte, "id")
        if key in self.reported_spans:
            return
        parent = outer.parent
        callee = outer
        if parent is not None and parent.type == "template_function":  # f<T>(...)
            callee, parent = parent, parent.parent
        is_call = parent is not None and parent.type == "call_expression" and parent.child_by_field_name("function") == callee
        if outer is not node:
            qualified = _qualified_name(outer)
            entry = self.cat.lookup(qualified)
            if entry is None:
                if word in _CUDA_DEVICE_CHECKS or qualified.endswith("DeviceType::CUDA"):
                    self.reported_spans.add(key)
                    self.add("AP1902", outer, qualified)
                return  # std::atomic, my::cuda::thing: not CUDA API
            self.reported_spans.add(key)
            self._api(entry, outer, qualified, call=is_call)
            return
        if node.type == "namespace_identifier":
            return
        self.reported_spans.add(key)
        if word in _ARCH_GUARDS:
            self.add("AP5009", node, word)
        elif word in _REGISTRATIONS:
            self._registration(node, word)
        elif word in _CUDA_DEVICE_CHECKS:
            self.add("AP1902", node, word, message=f"CUDA device-type check `{word}`: other accelerators report their own device type")
        elif word in _MANAGED:
            self.add("AP9107", node, word, backends=_managed_backends(), replacement=_rocm_name(self.cat.lookup(word)))
        elif (_WARP.fullmatch(word) or _ATOMIC.fullmatch(word) or _TEXTURE.fullmatch(word)) and not self._device_context(node):
            return  # a host helper that happens to share the name (atomicAdd in a C++ file, a `texture` type)
        elif _WARP.fullmatch(word):
            self._warp_intrinsic(node, word, parent if is_call else None)
        elif _ATOMIC.fullmatch(word):
            entry = self.cat.lookup(word)
            self.add("AP5006", node, word, replacement=_rocm_name(entry), backends=_kernel_backends())
        elif _TEXTURE.fullmatch(word) and (is_call or node.type == "type_identifier"):
            self.add("AP9105", node, word, backends=_unsupported_off_cuda(rocm=BackendStatus.ALTERNATIVE))
        else:
            entry = self.cat.lookup(word)
            if entry is not None:
                self._api(entry, node, word, call=is_call)

    def _warp_intrinsic(self, node, word: str, call) -> None:
        entry = self.cat.lookup(word)
        self.add("AP5005", node, word, replacement=_rocm_name(entry), backends=_warp_backends())
        if call is None:
            return
        arguments = call.child_by_field_name("arguments")
        first = arguments.named_children[0] if arguments is not None and arguments.named_children else None
        if first is not None and _squash(first.text).lower() in _FULL_MASKS:
            self.add("AP9101", first, word, message=f"full 32-lane mask {_squash(first.text)} passed to {word}", backends=_warp_backends())

    def _api(self, entry: ApiEntry, node, symbol: str, *, call: bool) -> None:
        family = entry.family.key
        section = entry.section
        if symbol in _LAUNCH_APIS:
            rule = "AP5004"
        elif symbol in _MANAGED:
            self.add("AP9107", node, symbol, backends=_managed_backends(), replacement=_rocm_name(entry))
            return
        elif "Texture" in section or "Surface" in section:
            self.add("AP9105", node, symbol, backends=_unsupported_off_cuda(rocm=BackendStatus.ALTERNATIVE))
            return
        elif family == "runtime":
            rule = "AP2001" if entry.kind == "function" else "AP2002"
        elif family == "driver":
            rule = "AP3001" if entry.kind == "function" else "AP3002"
        elif family == "device":
            if entry.kind == "type":
                if entry.rocm:
                    return  # __half, float2 ... exist under the same name on ROCm
                rule = "AP5013"
            elif symbol.startswith("__") and not symbol.startswith("__syncthreads"):
                rule = "AP5011"
            else:
                return  # sinf, expf, __syncthreads: portable C++/HIP math and barriers
        elif family == "aten":
            rule = "AP1902" if symbol in _CUDA_DEVICE_CHECKS else "AP1901"
        elif family == "wmma":
            rule = "AP5008"
        elif family == "cooperative_groups":
            rule = "AP5012"
        else:
            rule = rule_for_family(entry.family)  # from the knowledge files: a site family needs no code
            if rule is None:
                return
        is_type = (not call) and (entry.kind == "type" or not entry.in_table)
        if is_type:
            # Types and constants: one finding per symbol and file, with the use count.
            self.type_uses[symbol] += 1
            if symbol in self.first_type_finding:
                return
            self.first_type_finding[symbol] = len(self.findings)
        message = f"{entry.family.title}: {symbol}"
        history = entry.history()
        if history:
            message += f" ({history})"
        replacement = equivalent_for_library_call(symbol) if not is_type else None
        equivalents = entry.equivalents()
        if replacement is None and entry.rocm:
            replacement = f"{entry.rocm} (ROCm)"
        if equivalents:
            message += f"; {equivalents}"
        effort = "low" if is_type and rule.startswith("AP4") else None
        if entry.family.key in ("runtime", "driver") and entry.in_table and not entry.rocm:
            effort = "medium"  # no HIP twin: not a rename even on ROCm
        if entry.cuda_removed:
            effort = "medium"
        self.add(rule, node, symbol, message=message, replacement=replacement, backends=_entry_backends(entry), family=family, effort=effort)

    def _finish_type_counts(self) -> None:
        for symbol, index in self.first_type_finding.items():
            uses = self.type_uses[symbol]
            if uses > 1 and index < len(self.findings):  # beyond the file's finding limit it was not kept
                finding = self.findings[index]
                self.findings[index] = replace(finding, message=f"{finding.message} ({uses} uses in this file)")

    # ------------------------------------------------------------------ structure

    def _includes(self, includes) -> None:
        for node in includes:
            path = node.text.decode("utf-8", errors="replace").strip().strip("<>\"")
            family = self.cat.header_family(path)
            if family is None:
                continue
            rule = _HEADER_RULES[family.category]
            statuses = {key: BackendStatus.UNKNOWN for key in knowledge.vendors()}
            statuses["cuda"] = BackendStatus.OK
            for vendor, (status, _text) in family.vendors.items():
                if vendor in statuses:
                    statuses[vendor] = status
            self.add(rule, node, path, message=f"{family.title} header {path}", backends=statuses, family=family.key)

    def _asm(self, blocks) -> None:
        for node in blocks:
            text = node.text.decode("utf-8", errors="replace")
            function = self.device_function_at(node.start_byte)
            where = f" in {function.name}" if function else ""
            self.add("AP5007", node, "asm", message=f"inline PTX assembly{where}", backends=_unsupported_off_cuda())
            if re.search(r"\b(?:w?gmma|mma|ldmatrix)\.", text):
                self.add("AP5008", node, "mma (PTX)", message=f"tensor-core PTX (mma/wgmma/ldmatrix){where}", backends=_unsupported_off_cuda())

    def _lane_arithmetic(self, binaries) -> None:
        for node in binaries:
            if self.device_function_at(node.start_byte) is None:
                continue
            operator = node.child_by_field_name("operator")
            right = node.child_by_field_name("right")
            if operator is None or right is None:
                continue
            op = operator.type
            value = _squash(right.text).lower().rstrip("u")
            if (op == "&" and value in {"31", "0x1f"}) or (op in {"%", "/"} and value == "32") or (op == ">>" and value == "5"):
                expression = _squash(node.text)
                self.add("AP9102", node, expression, message=f"warp-size-32 lane arithmetic: {expression}", backends=_warp_backends())

    def _fp64(self, primitives) -> None:
        flagged: set[int] = set()
        for node in primitives:
            if node.text != b"double":
                continue
            function = self.device_function_at(node.start_byte)
            if function is None or function.start in flagged:
                continue
            flagged.add(function.start)
            self.add("AP9104", node, function.name, message=f"double-precision (fp64) arithmetic in device function {function.name}", backends=_fp64_backends())

    def _warp_size_constants(self, captures) -> None:
        pairs = list(zip(captures.get("define_name", []), captures.get("define_value", []), strict=False))
        pairs += list(zip(captures.get("const_name", []), captures.get("const_value", []), strict=False))
        for name, value in pairs:
            if _WARP_SIZE_NAME.fullmatch(name.text.decode("ascii", errors="replace")) and _squash(value.text).rstrip("uU") == "32":
                self.add("AP9108", name, name.text.decode("ascii"), backends=_warp_backends())

    def _warp_loops(self, loops) -> None:
        """Shuffle reductions whose loop walks the offsets of a 32-lane warp (16, 8, 4, 2, 1 or 1 .. 16).

        Flagged only when the loop variable is the offset of a warp shuffle in the body: a
        halving loop over shared memory, or one that starts from warpSize / 2, is not.
        """
        for node in loops:
            if self.device_function_at(node.start_byte) is None:
                continue
            parts = {name: node.child_by_field_name(name) for name in ("initializer", "condition", "update", "body")}
            if any(part is None for part in parts.values()):
                continue
            start = _LOOP_START.fullmatch(_squash(parts["initializer"].text).rstrip(";"))
            if start is None:
                continue
            var, value = start.group("var"), start.group("value").lower().rstrip("u")
            update = _squash(parts["update"].text).replace(" ", "")
            condition = _squash(parts["condition"].text).replace(" ", "")
            halving = value in {"16", "0x10"} and update in _halvings(var)
            doubling = value == "1" and update in _doublings(var) and condition in {f"{var}<32", f"{var}<=16", f"{var}<0x20"}
            if not (halving or doubling) or not _shuffles_with(parts["body"].text, var):
                continue
            walk = "16, 8, 4, 2, 1" if halving else "1, 2, 4, 8, 16"
            self.add("AP9109", parts["initializer"], f"{var} = {value}",
                     message=f"warp reduction loop over offsets {walk}: assumes 32-lane warps", backends=_warp_backends())

    def _launch_bounds(self, bounds) -> None:
        for node in bounds:
            numbers = [c for c in node.named_children if c.type == "number_literal"]
            if numbers and _squash(numbers[0].text).rstrip("uU") == "32":
                function = self.device_function_at(node.start_byte)
                name = function.name if function else "__launch_bounds__"
                self.add("AP9103", node, name, message=f"__launch_bounds__(32) on {name}: one 32-lane warp per block", backends=_warp_backends())

    def _registration(self, node, word: str) -> None:
        # TORCH_LIBRARY_IMPL(ns, CUDA, m) parses as a function declarator with "parameters".
        declarator = node.parent
        params = declarator.child_by_field_name("parameters") if declarator is not None else None
        args = [_squash(p.text) for p in params.named_children] if params is not None else []
        symbol = f"{word}({', '.join(args)})" if args else word
        self.add("AP5020", node, symbol, message=f"operator registration {symbol}")
        if word == "TORCH_LIBRARY_IMPL" and len(args) >= 2 and args[1] == "CUDA":
            self.add("AP1902", params.named_children[1], "CUDA dispatch key", message="operators registered for the CUDA dispatch key only")

    def _registrations(self, calls) -> None:
        if not any(f.rule_id == "AP5020" for f in self.findings):
            return
        for call in calls:
            function = call.child_by_field_name("function")
            if function is None or function.type != "field_expression":
                continue
            field_node = function.child_by_field_name("field")
            if field_node is None or field_node.text not in (b"def", b"impl"):
                continue
            arguments = call.child_by_field_name("arguments")
            first = arguments.named_children[0] if arguments is not None and arguments.named_children else None
            if first is None or first.type != "string_literal":
                continue
            op = first.text.decode("utf-8", errors="replace").strip('"').split("(")[0]
            target = _squash(arguments.named_children[1].text) if len(arguments.named_children) > 1 else ""
            equivalent = equivalent_for_kernel(op)
            message = f"Python-visible operator {op!r}" + (f" -> {target.lstrip('&')}" if target else "")
            if equivalent is not None:
                message += f"; portable equivalent: {equivalent.replacement}"
            self.add("AP5020", first, op, message=message, replacement=equivalent.replacement if equivalent else None)


# --------------------------------------------------------------------------- across files

KERNEL_RULE = "AP5001"
LAUNCH_RULE = "AP5003"
_LAUNCH_TEXT = re.compile(r"launched \d+× in this file|no launch in this file")
MAX_LISTED_SITES = 3


def link_kernel_launches(findings: list[Finding]) -> list[Finding]:
    """Count each kernel's launches over the whole tree (by name), not only in its own file.

    Kernels defined in a header and launched from several .cu files are the
    common case this covers; two static kernels of the same name in different
    files share their counts (the message says "by name").
    """
    sites: dict[str, list[Location]] = {}
    for finding in findings:
        if finding.rule_id == LAUNCH_RULE:
            sites.setdefault(kernel_name(finding.symbol), []).append(finding.location)
    if not sites:
        return findings
    linked = []
    for finding in findings:
        if finding.rule_id == KERNEL_RULE:
            launches = sites.get(kernel_name(finding.symbol), [])
            elsewhere = [loc for loc in launches if loc.path != finding.location.path]
            if elsewhere:
                here = len(launches) - len(elsewhere)
                listed = ", ".join(f"{loc.path}:{loc.line}" for loc in elsewhere[:MAX_LISTED_SITES])
                more = f" and {len(elsewhere) - MAX_LISTED_SITES} more" if len(elsewhere) > MAX_LISTED_SITES else ""
                text = f"launched {len(launches)}× by name ({here} in this file, {len(elsewhere)} elsewhere: {listed}{more})"
                finding = replace(finding, message=_LAUNCH_TEXT.sub(text, finding.message, count=1))
        linked.append(finding)
    return linked



# --------------------------------------------------------------------------- #if branches

_CONDITION_DIRECTIVES = frozenset({"if", "ifdef", "ifndef", "elif", "elifdef", "elifndef"})
_OPEN_DIRECTIVES = frozenset({"if", "ifdef", "ifndef"})
_BRANCH_DIRECTIVES = frozenset({"elif", "elifdef", "elifndef", "else"})
_MASKED_NODES = frozenset({"comment", "string_literal", "raw_string_literal", "char_literal", "system_lib_string"})
# Variants scanned for a file whose #if branches do not parse together: branch 0, 1, ... of every group.
MAX_BRANCH_VARIANTS = 4


def _parse(data: bytes):
    from tree_sitter import QueryCursor

    parser, query = _language()
    root = parser.parse(data).root_node
    return root, QueryCursor(query).captures(root)


_MACRO_PREFIX = b"void __accelport_macro_body__(void) {\n"
_MACRO_SUFFIX = b"\n;}\n"
_CONTINUATION = re.compile(rb"\\(?=\r?\n)")


def _macro_names(captures) -> list[tuple[str, Any]]:
    """(macro name, body node) for object- and function-like #defines."""
    pairs = []
    for body in captures.get("macro_body", []):
        define = body.parent
        name = define.child_by_field_name("name") if define is not None else None
        if name is not None:
            pairs.append((name.text.decode("utf-8", errors="replace"), body))
    return pairs


def _solid(data: bytes) -> int:
    """Bytes that are not blanks or line breaks."""
    return len(data) - sum(data.count(c) for c in (b" ", b"\n", b"\t", b"\r"))


def _finding_key(finding: Finding) -> tuple:
    loc = finding.location
    return (finding.rule_id, loc.line, loc.column, finding.symbol)


def _code_mask(root) -> list[tuple[int, int]]:
    """Sorted byte spans of comments and string/char literals: tree-sitter lexes them even inside ERROR nodes."""
    spans = []
    stack = [root]
    while stack:
        node = stack.pop()
        if node.type in _MASKED_NODES:
            spans.append((node.start_byte, node.end_byte))
        elif node.child_count:
            stack.extend(node.children)
    spans.sort()
    return spans


def _masked(spans: list[tuple[int, int]], offset: int) -> bool:
    index = bisect_right(spans, (offset, float("inf"))) - 1
    return index >= 0 and spans[index][0] <= offset < spans[index][1]


@dataclass
class _Group:
    """One #if ... #endif: the byte span of each branch's body, and whether it has an #else."""

    branches: list[tuple[int, int]] = field(default_factory=list)
    has_else: bool = False
    open_at: int = 0  # where the current branch's body starts


def _conditionals(data: bytes, mask: list[tuple[int, int]]) -> tuple[list[_Group], list[tuple[int, int, str]]]:
    """The file's conditional groups and its conditional directive lines (start, end, name).

    A directive is a line whose first non-blank byte is `#` outside any comment or
    string; backslash-continued lines belong to it.
    """
    groups: list[_Group] = []
    stack: list[_Group] = []
    directives: list[tuple[int, int, str]] = []
    offset = 0
    size = len(data)
    while offset < size:
        end = data.find(b"\n", offset)
        end = size if end < 0 else end
        while end < size and data[offset:end].rstrip(b"\r").endswith(b"\\"):
            nxt = data.find(b"\n", end + 1)
            end = size if nxt < 0 else nxt
        line = data[offset:end]
        stripped = line.lstrip(b" \t")
        hash_at = offset + len(line) - len(stripped)
        if stripped.startswith(b"#") and not _masked(mask, hash_at):
            match = _WORD.match(stripped.lstrip(b"# \t")) if len(stripped) > 1 else None
            name = match.group().decode("ascii") if match else ""
            line_end = min(end + 1, size)
            if name in _OPEN_DIRECTIVES:
                group = _Group(open_at=line_end)
                stack.append(group)
                groups.append(group)
                directives.append((offset, end, name))
            elif name in _BRANCH_DIRECTIVES and stack:
                group = stack[-1]
                group.branches.append((group.open_at, offset))
                group.open_at = line_end
                group.has_else = group.has_else or name == "else"
                directives.append((offset, end, name))
            elif name == "endif" and stack:
                group = stack.pop()
                group.branches.append((group.open_at, offset))
                directives.append((offset, end, name))
        offset = end + 1
    for group in stack:  # unterminated at the end of the file
        group.branches.append((group.open_at, size))
    return groups, directives


_BLANKS = bytes(0x0A if byte == 0x0A else 0x20 for byte in range(256))


def _blank(buffer: bytearray, start: int, end: int) -> None:
    """Spaces over [start, end), newlines kept: offsets, lines and columns stay those of the file."""
    end = min(end, len(buffer))
    if start < end:
        buffer[start:end] = bytes(buffer[start:end]).translate(_BLANKS)


def _branch_variants(data: bytes, groups: list[_Group], directives: list[tuple[int, int, str]]):
    """Copies of `data` taking branch k of every group (its last one, or none without #else, when it has fewer)."""
    choices = max(len(g.branches) + (0 if g.has_else else 1) for g in groups)
    for k in range(min(choices, MAX_BRANCH_VARIANTS)):
        buffer = bytearray(data)
        for start, end, _name in directives:
            _blank(buffer, start, end)
        for group in groups:
            last = len(group.branches) - (1 if group.has_else else 0)  # == len(branches): the implicit empty #else
            chosen = min(k, last)
            for index, (start, end) in enumerate(group.branches):
                if index != chosen:
                    _blank(buffer, start, end)
        yield bytes(buffer)

# --------------------------------------------------------------------------- helpers

def _interesting(cat: Catalogue, word: str) -> bool:
    """Could this word be a CUDA token? Cached on the catalogue across files: names repeat."""
    known = cat.memo.get(word)
    if known is None:
        known = (
            word in cat.namespace_heads
            or word in _ARCH_GUARDS
            or word in _REGISTRATIONS
            or word in _CUDA_DEVICE_CHECKS
            or word in _MANAGED
            or _WARP.fullmatch(word) is not None
            or _ATOMIC.fullmatch(word) is not None
            or _TEXTURE.fullmatch(word) is not None
            or cat.lookup(word) is not None
        )
        if len(cat.memo) < 500_000:
            cat.memo[word] = known
    return known



def _occurrences(data: bytes, words: set[str]) -> list[tuple[int, str]]:
    """(offset, word) for every whole-word occurrence, in file order (bytes.find: no per-file regex)."""
    found = []
    for word in words:
        needle = word.encode("ascii")
        at = data.find(needle)
        while at >= 0:
            end = at + len(needle)
            if (at == 0 or not _is_word_byte(data[at - 1])) and (end == len(data) or not _is_word_byte(data[end])):
                found.append((at, word))
            at = data.find(needle, end)
    found.sort()
    return found


def _is_word_byte(byte: int) -> bool:
    return byte == 95 or 48 <= byte <= 57 or 65 <= byte <= 90 or 97 <= byte <= 122


_LOOP_START = re.compile(r"(?:(?:unsigned\s+|const\s+)?(?:int|unsigned|uint32_t|int32_t|size_t|auto)\s+)?(?P<var>[A-Za-z_]\w*)\s*=\s*(?P<value>0[xX]10|16|1)[uU]?")


def _halvings(var: str) -> set[str]:
    return {f"{var}/=2", f"{var}>>=1", f"{var}={var}/2", f"{var}={var}>>1"}


def _doublings(var: str) -> set[str]:
    return {f"{var}*=2", f"{var}<<=1", f"{var}={var}*2", f"{var}={var}<<1"}


def _shuffles_with(body: bytes, var: str) -> bool:
    """Whether `body` calls a __shfl* intrinsic with `var` among its arguments."""
    text = body.decode("utf-8", errors="replace")
    for match in re.finditer(r"__shfl\w*\s*\(", text):
        depth, index = 1, match.end()
        while index < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[index], 0)
            index += 1
        if re.search(rf"\b{re.escape(var)}\b", text[match.end():index]):
            return True
    return False


def _squash(text: bytes) -> str:
    return " ".join(text.decode("utf-8", errors="replace").split())


def _inside_quotes(text: bytes, offset: int) -> bool:
    return text[:offset].count(b'"') % 2 == 1


def _qualified_name(node) -> str:
    text = "".join(node.text.decode("utf-8", errors="replace").split())
    return text.split("<", 1)[0]


def _declarator_name(declarator) -> str:
    node = declarator
    while node is not None and node.type not in ("identifier", "field_identifier", "qualified_identifier", "operator_name", "destructor_name"):
        inner = node.child_by_field_name("declarator")
        if inner is None:
            break
        node = inner
    if node is None:
        return "?"
    return _qualified_name(node) if node.type == "qualified_identifier" else node.text.decode("utf-8", errors="replace")


_TEMPLATE_GAPS = re.compile(r"(<) | (?=>)")  # `k< double, 8 >` -> `k<double, 8>`


def kernel_name(symbol: str) -> str:
    """The bare kernel name of a launch or definition symbol: `ns::k<T, 4>` -> `k`."""
    return symbol.split("<", 1)[0].strip().rsplit("::", 1)[-1]


def _entry_backends(entry: ApiEntry) -> dict[str, BackendStatus]:
    return _symbol_backends(entry.symbol) if entry.in_table else entry.backends()


@knowledge.derived_cache
def _symbol_backends(symbol: str) -> dict[str, BackendStatus]:
    return catalogue().lookup(symbol).backends()


def _rocm_name(entry: ApiEntry | None) -> str | None:
    return f"{entry.rocm} (ROCm)" if entry is not None and entry.rocm else None


def _by_profile(rule) -> dict[str, BackendStatus]:
    statuses = {}
    for key, profile in knowledge.vendors().items():
        statuses[key] = rule(profile)
    statuses["cuda"] = BackendStatus.OK
    return statuses


@knowledge.derived_cache
def _warp_backends() -> dict[str, BackendStatus]:
    def status(profile):
        if profile.warp_size == 32:
            return BackendStatus.OK
        if profile.warp_size == 0:
            return BackendStatus.UNSUPPORTED  # no warps: the kernel is rewritten anyway
        return BackendStatus.PORTABLE  # fix the width and the masks

    return _by_profile(status)


@knowledge.derived_cache
def _fp64_backends() -> dict[str, BackendStatus]:
    table = {"fast": BackendStatus.OK, "none": BackendStatus.UNSUPPORTED, "slow": BackendStatus.PORTABLE, "emulated": BackendStatus.PORTABLE}
    return _by_profile(lambda p: table.get(p.fp64, BackendStatus.UNKNOWN))


@knowledge.derived_cache
def _kernel_backends() -> dict[str, BackendStatus]:
    # hipcc compiles CUDA kernels after hipify; other stacks need a rewrite.
    return backend_statuses(cuda_like=BackendStatus.PORTABLE, others=BackendStatus.ALTERNATIVE)


@knowledge.derived_cache
def _managed_backends() -> dict[str, BackendStatus]:
    return backend_statuses(cuda_like=BackendStatus.PORTABLE, others=BackendStatus.UNKNOWN)


@knowledge.derived_cache
def _unsupported_off_cuda(rocm: BackendStatus = BackendStatus.UNSUPPORTED) -> dict[str, BackendStatus]:
    statuses = backend_statuses(cuda_like=rocm, others=BackendStatus.UNSUPPORTED)
    statuses["cuda"] = BackendStatus.OK
    return statuses
