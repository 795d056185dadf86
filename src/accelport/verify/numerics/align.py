"""Pair the records of two dumps even when their op sequences differ: renames, fused ops, extra casts.

Records are keyed by (phase, module, op) after the mapping file is applied, and
aligned step by step. Identical runs take the fast path (heads equal, pair them);
where the sequences part, a window of each side is aligned with a longest-common-
subsequence match (difflib), so memory stays at two windows however long the dump.
"""

from __future__ import annotations

import difflib
import json
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accelport.errors import UserError
from accelport.fileio import read_input_text

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

Record = dict[str, Any]
Pair = tuple[Record | None, Record | None]


@dataclass
class Mapping:
    """How TEST's names relate to REF's: renamed ops, moved modules, ops fused on one side."""

    ops: dict[str, str] = field(default_factory=dict)  # TEST op -> REF op
    modules: dict[str, str] = field(default_factory=dict)  # TEST module prefix -> REF prefix
    fused_ref: list[tuple[str, tuple[str, ...]]] = field(
        default_factory=list
    )  # name, REF op sequence
    fused_test: list[tuple[str, tuple[str, ...]]] = field(
        default_factory=list
    )  # name, TEST op sequence

    @classmethod
    def load(cls, path: str | Path | None) -> Mapping:
        if path is None:
            return cls()
        path = Path(path)
        text = read_input_text(path, "mapping file", hint="check the path of the record-name mapping")
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise UserError(
                f"{path}: not valid TOML ({exc}); see docs/compare.md for the mapping format"
            ) from None
        mapping = cls()
        known = {"rename", "fuse"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise UserError(f"{path}: unknown key {unknown[0]!r}; a mapping file has [rename.ops], [rename.modules] and [[fuse]]")
        rename = data.get("rename", {})
        if not isinstance(rename, dict):
            raise UserError(f"{path}: `rename` must be a table ([rename.ops] and [rename.modules])")
        for table in ("ops", "modules"):
            entries = rename.get(table, {})
            if not isinstance(entries, dict) or not all(isinstance(v, str) for v in entries.values()):
                raise UserError(
                    f'{path}: [rename.{table}] must map names to names ("TEST name" = "REF name")'
                )
            setattr(mapping, table, dict(entries))
        fused = data.get("fuse", [])
        if not isinstance(fused, list) or not all(isinstance(e, dict) for e in fused):
            raise UserError(f"{path}: `fuse` must be an array of tables ([[fuse]] with name, ref and test)")
        for index, entry in enumerate(fused):
            name = entry.get("name")
            if not isinstance(name, str) or not name or not (entry.get("ref") or entry.get("test")):
                raise UserError(
                    f"{path}: [[fuse]] entry {index + 1} needs `name` and a `ref` or `test` op list"
                )
            for side in ("ref", "test"):
                ops = entry.get(side)
                if ops is None or ops == []:
                    continue
                if not isinstance(ops, list) or not all(isinstance(o, str) and o for o in ops):
                    raise UserError(
                        f'{path}: [[fuse]] {name!r}: `{side}` must be a list of op names (["aten.mm.default", ...])'
                    )
                (mapping.fused_ref if side == "ref" else mapping.fused_test).append((name, tuple(ops)))
        return mapping

    def rename_test(self, record: Record) -> Record:
        op = record.get("op", "")
        if op in self.ops:
            record = {**record, "op": self.ops[op], "op_test": op}
        module = record.get("module", "")
        for prefix in sorted(self.modules, key=len, reverse=True):
            if module == prefix or module.startswith(prefix):
                record = {
                    **record,
                    "module": self.modules[prefix] + module[len(prefix) :],
                    "module_test": module,
                }
                break
        return record


def key(record: Record) -> tuple[str, str, str, tuple[int, ...]]:
    """Identity of a record for alignment: where it ran, what it ran, and the shape it produced.

    The shape keeps apart records that share an op name inside one module (the gradient
    detaches of a weight and of its bias) when the two autograd engines order them differently.
    """
    outs = record.get("out") or [{}]
    return (
        record.get("phase", ""),
        record.get("module", ""),
        record.get("op", ""),
        tuple(outs[0].get("shape") or ()),
    )


def fuse(
    records: Iterable[Record], patterns: list[tuple[str, tuple[str, ...]]]
) -> Iterator[Record]:
    """Collapse each run of ops matching a pattern (same step, phase and module) into one record."""
    if not patterns:
        yield from records
        return
    longest = max(len(p) for _, p in patterns)
    window: deque[Record] = deque()
    source = iter(records)
    exhausted = False
    while True:
        while not exhausted and len(window) < longest:
            try:
                window.append(next(source))
            except StopIteration:
                exhausted = True
        if not window:
            return
        head = window[0]
        matched = None
        for name, ops in patterns:
            if len(window) >= len(ops) and all(
                window[i].get("op") == op
                and window[i].get("module") == head.get("module")
                and window[i].get("phase") == head.get("phase")
                and window[i].get("step") == head.get("step")
                for i, op in enumerate(ops)
            ):
                matched = (name, len(ops))
                break
        if matched is None:
            yield window.popleft()
            continue
        name, count = matched
        group = [window.popleft() for _ in range(count)]
        produced = {g["seq"] for g in group}
        inputs, seen = [], set()
        for g in group:
            for t in g.get("in", []):
                ident = (t.get("src"), t.get("file"), t.get("start"), json.dumps(t.get("stats")))
                if t.get("src") not in produced and ident not in seen:
                    seen.add(ident)
                    inputs.append(t)
        yield {
            **group[-1],
            "op": name,
            "in": inputs,
            "seq": group[0]["seq"],
            "fused_from": [g["op"] for g in group],
            "args": None,
        }


def align(ref: Iterable[Record], test: Iterable[Record], window: int = 2048) -> Iterator[Pair]:
    """Yield (ref, test) pairs in execution order; one side is None where the other has an extra record."""
    ref_it, test_it = _StepReader(iter(ref)), _StepReader(iter(test))
    while True:
        step_r, step_t = ref_it.peek_step(), test_it.peek_step()
        if step_r is None and step_t is None:
            return
        # Steps only one side has are unmatched whole.
        if step_t is None or (step_r is not None and step_r < step_t):
            for record in ref_it.take_step(step_r):
                yield record, None
            continue
        if step_r is None or step_t < step_r:
            for record in test_it.take_step(step_t):
                yield None, record
            continue
        yield from _align_step(ref_it, test_it, step_r, window)


class _StepReader:
    """A record stream that can be read one step at a time, a window at a time."""

    def __init__(self, source: Iterator[Record]) -> None:
        self.source = source
        self.buffer: deque[Record] = deque()
        self.done = False

    def _pull(self) -> bool:
        if self.done:
            return False
        try:
            self.buffer.append(next(self.source))
            return True
        except StopIteration:
            self.done = True
            return False

    def peek_step(self) -> int | None:
        if not self.buffer and not self._pull():
            return None
        return int(self.buffer[0].get("step", 0))

    def fill(self, step: int, size: int) -> deque[Record]:
        """Buffer up to `size` records of `step` (never more records of later steps than one)."""
        while len(self.buffer) < size:
            if self.buffer and int(self.buffer[-1].get("step", 0)) != step:
                break
            if not self._pull():
                break
        return self.buffer

    def in_step(self, step: int) -> int:
        count = 0
        for record in self.buffer:
            if int(record.get("step", 0)) != step:
                break
            count += 1
        return count

    def step_read(self, step: int, count: int) -> bool:
        """Are all records of `step` in the buffer (the first `count` are of it, and nothing follows)?"""
        return count < len(self.buffer) or self.done

    def take_step(self, step: int) -> Iterator[Record]:
        while True:
            self.fill(step, 1)
            if not self.buffer or int(self.buffer[0].get("step", 0)) != step:
                return
            yield self.buffer.popleft()


def _align_step(ref: _StepReader, test: _StepReader, step: int, window: int) -> Iterator[Pair]:
    while True:
        ref.fill(step, 1)
        test.fill(step, 1)
        n_r, n_t = ref.in_step(step), test.in_step(step)
        if n_r == 0 and n_t == 0:
            return
        if n_r == 0:
            yield None, test.buffer.popleft()
            continue
        if n_t == 0:
            yield ref.buffer.popleft(), None
            continue
        if key(ref.buffer[0]) == key(test.buffer[0]):
            yield ref.buffer.popleft(), test.buffer.popleft()
            continue
        ref.fill(step, window)
        test.fill(step, window)
        n_r, n_t = ref.in_step(step), test.in_step(step)
        a = [key(ref.buffer[i]) for i in range(n_r)]
        b = [key(test.buffer[i]) for i in range(n_t)]
        matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
        blocks = [m for m in matcher.get_matching_blocks() if m.size]
        if not blocks:
            # Nothing in common within the window: these records are extra on both sides.
            for _ in range(n_r):
                yield ref.buffer.popleft(), None
            for _ in range(n_t):
                yield None, test.buffer.popleft()
            continue
        # Emit every common run the windows show, except a last one that touches a window's
        # edge while more of the step is still unread (it may continue differently).
        whole_r = ref.step_read(step, n_r)
        whole_t = test.step_read(step, n_t)
        last = blocks[-1]
        if (
            len(blocks) > 1
            and not (whole_r and whole_t)
            and (last.a + last.size >= n_r or last.b + last.size >= n_t)
        ):
            blocks = blocks[:-1]
        pos_a = pos_b = 0
        for block in blocks:
            for _ in range(block.a - pos_a):
                yield ref.buffer.popleft(), None
            for _ in range(block.b - pos_b):
                yield None, test.buffer.popleft()
            for _ in range(block.size):
                yield ref.buffer.popleft(), test.buffer.popleft()
            pos_a, pos_b = block.a + block.size, block.b + block.size
