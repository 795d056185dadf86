"""Kernels, launches and warp-width hazards in C/C++/CUDA: device functions, `<<<...>>>`, PTX, 32-lane assumptions."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

from accelport.findings import Finding, Location
from accelport.inventory.cxx.backends import (
    _fp64_backends,
    _kernel_backends,
    _rocm_name,
    _unsupported_off_cuda,
    _warp_backends,
)
from accelport.inventory.cxx.syntax import (
    _CONTINUATION,
    _MACRO_PREFIX,
    _MACRO_SUFFIX,
    _TEMPLATE_GAPS,
    _declarator_name,
    _parse,
    _squash,
    kernel_name,
)
from accelport.inventory.kernel_equivalents import (
    equivalent_for_kernel,
)

_FULL_MASKS = frozenset({"0xffffffff", "0xffffffffu", "0xffffffffull", "~0u", "0xffffffffffffffff"})
_WARP_SIZE_NAME = re.compile(r"(?i)k?_?warp_?size")


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


class _KernelChecks:
    """The kernel, launch and warp-width checks of one file's scan (a part of `_FileScan`)."""

    def _device_context(self, node) -> bool:
        """CUDA source (.cu/.cuh) or inside a __global__/__device__ function."""
        return self.cuda_source or self.device_function_at(node.start_byte) is not None

    def device_function_at(self, offset: int) -> DeviceFunction | None:
        for function in self.device_functions:
            if function.start <= offset < function.end:
                return function
        return None

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

    def _warp_intrinsic(self, node, word: str, call) -> None:
        entry = self.cat.lookup(word)
        self.add("AP5005", node, word, replacement=_rocm_name(entry), backends=_warp_backends())
        if call is None:
            return
        arguments = call.child_by_field_name("arguments")
        first = arguments.named_children[0] if arguments is not None and arguments.named_children else None
        if first is not None and _squash(first.text).lower() in _FULL_MASKS:
            self.add("AP9101", first, word, message=f"full 32-lane mask {_squash(first.text)} passed to {word}", backends=_warp_backends())

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
