"""CUDA API uses in C/C++/CUDA: identifiers classified by the catalogue into runtime, driver, library, ATen rules."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from accelport import knowledge
from accelport.findings import BackendStatus, Category
from accelport.inventory.cuda_api import ApiEntry, Catalogue, rule_for_family
from accelport.inventory.cxx.backends import (
    _entry_backends,
    _kernel_backends,
    _managed_backends,
    _rocm_name,
    _unsupported_off_cuda,
)
from accelport.inventory.cxx.syntax import (
    _IDENT_TYPES,
    _WORD,
    _inside_quotes,
    _occurrences,
    _qualified_name,
    _squash,
    _without_comments,
)
from accelport.inventory.kernel_equivalents import (
    equivalent_for_kernel,
    equivalent_for_library_call,
)


@dataclass(frozen=True, slots=True)
class RuleNames:
    """The CUDA names reported under rules of their own: each rule's `symbols` or `pattern` in rules/cxx.toml."""

    arch_guards: frozenset[str]  # AP5009
    launch_apis: frozenset[str]  # AP5004
    managed: frozenset[str]  # AP9107
    registrations: frozenset[str]  # AP5020
    device_checks: frozenset[str]  # AP1902
    warp: re.Pattern[str]  # AP5005
    atomic: re.Pattern[str]  # AP5006
    texture: re.Pattern[str]  # AP9105


@knowledge.derived_cache
def rule_names() -> RuleNames:
    tables = {table["id"]: table for table in knowledge.read_toml("rules/cxx.toml")["rule"]}

    def symbols(rule_id: str) -> frozenset[str]:
        return frozenset(tables[rule_id]["symbols"])

    def pattern(rule_id: str) -> re.Pattern[str]:
        return re.compile(tables[rule_id]["pattern"])

    return RuleNames(
        arch_guards=symbols("AP5009"),
        launch_apis=symbols("AP5004"),
        managed=symbols("AP9107"),
        registrations=symbols("AP5020"),
        device_checks=symbols("AP1902"),
        warp=pattern("AP5005"),
        atomic=pattern("AP5006"),
        texture=pattern("AP9105"),
    )

_TORCH_NAMESPACES = frozenset({"at", "c10", "torch"})


# Library family -> rule.
_HEADER_RULES = {
    Category.FRAMEWORK_API: "AP1910",
    Category.RUNTIME_API: "AP2010",
    Category.DRIVER_API: "AP3010",
    Category.LIBRARY_CALL: "AP4010",
    Category.KERNEL: "AP5010",
}


def _interesting(cat: Catalogue, names: RuleNames, word: str) -> bool:
    """Could this word be a CUDA token? Cached on the catalogue across files: names repeat."""
    known = cat.memo.get(word)
    if known is None:
        known = (
            word in cat.namespace_heads
            or word in names.arch_guards
            or word in names.registrations
            or word in names.device_checks
            or word in names.managed
            or names.warp.fullmatch(word) is not None
            or names.atomic.fullmatch(word) is not None
            or names.texture.fullmatch(word) is not None
            or cat.lookup(word) is not None
        )
        if len(cat.memo) < 500_000:
            cat.memo[word] = known
    return known


class _ApiUses:
    """The identifier, include and registration checks of one file's scan (a part of `_FileScan`)."""

    # ------------------------------------------------------------------ identifiers

    def _identifiers(self, root, macro_bodies) -> None:
        words = {w.decode("ascii") for w in set(_WORD.findall(self.data))}
        wanted = {w for w in words if _interesting(self.cat, self.names, w)}
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
            text = _without_comments(body.text)
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
        names = self.names
        parent = outer.parent
        callee = outer
        if parent is not None and parent.type == "template_function":  # f<T>(...)
            callee, parent = parent, parent.parent
        is_call = parent is not None and parent.type == "call_expression" and parent.child_by_field_name("function") == callee
        if outer is not node:
            qualified = _qualified_name(outer)
            entry = self.cat.lookup(qualified)
            if entry is None and word not in names.device_checks and qualified.split("::", 1)[0] in _TORCH_NAMESPACES:
                # `at::CUDAGeneratorImpl`, `at::PhiloxCudaState`: ATen CUDA names outside at::cuda.
                entry = self.cat.lookup(word) if word == qualified.rsplit("::", 1)[-1] else None
                entry = entry if entry is not None and entry.family.key == "aten" else None
            if entry is None:
                if word in names.device_checks or qualified.endswith("DeviceType::CUDA"):
                    self.reported_spans.add(key)
                    self.add("AP1902", outer, qualified)
                return  # std::atomic, my::cuda::thing: not CUDA API
            self.reported_spans.add(key)
            self._api(entry, outer, qualified, call=is_call)
            return
        if node.type == "namespace_identifier":
            return
        self.reported_spans.add(key)
        if word in names.arch_guards:
            self.add("AP5009", node, word)
        elif word in names.registrations:
            self._registration(node, word)
        elif word in names.device_checks:
            self.add("AP1902", node, word, message=f"CUDA device-type check `{word}`: other accelerators report their own device type")
        elif word in names.managed:
            self.add("AP9107", node, word, backends=_managed_backends(), replacement=_rocm_name(self.cat.lookup(word)))
        elif (names.warp.fullmatch(word) or names.atomic.fullmatch(word) or names.texture.fullmatch(word)) and not self._device_context(node):
            return  # a host helper that happens to share the name (atomicAdd in a C++ file, a `texture` type)
        elif names.warp.fullmatch(word):
            self._warp_intrinsic(node, word, parent if is_call else None)
        elif names.atomic.fullmatch(word):
            entry = self.cat.lookup(word)
            self.add("AP5006", node, word, replacement=_rocm_name(entry), backends=_kernel_backends())
        elif names.texture.fullmatch(word) and (is_call or node.type == "type_identifier"):
            self.add("AP9105", node, word, backends=_unsupported_off_cuda(rocm=BackendStatus.ALTERNATIVE))
        else:
            entry = self.cat.lookup(word)
            if entry is not None:
                self._api(entry, node, word, call=is_call)

    def _api(self, entry: ApiEntry, node, symbol: str, *, call: bool) -> None:
        family = entry.family.key
        section = entry.section
        if symbol in self.names.launch_apis:
            rule = "AP5004"
        elif symbol in self.names.managed:
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
            rule = "AP1902" if symbol in self.names.device_checks else "AP1901"
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

    def _registration(self, node, word: str) -> None:
        # TORCH_LIBRARY_IMPL(ns, CUDA, m) parses as a function declarator with "parameters".
        declarator = node.parent
        params = declarator.child_by_field_name("parameters") if declarator is not None else None
        args = [_squash(p.text) for p in params.named_children] if params is not None else []
        symbol = f"{word}({', '.join(args)})" if args else word
        self.add("AP5020", node, symbol, message=f"operator registration {symbol}")
        if word in ("TORCH_LIBRARY_IMPL", "STABLE_TORCH_LIBRARY_IMPL") and len(args) >= 2 and args[1] == "CUDA":
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
