"""Capture what a PyTorch run computes: every ATen op, parameter and input, as statistics or full tensors.

    with accelport.verify.capture("runs/cuda", tensors=False) as cap:
        for batch in data:
            train_step(batch)        # optimizer.step() ends a step; or call cap.step()

Ops are seen at the ATen level through a TorchDispatchMode (so in-place,
functional and fused ops all show up, forward and backward), and attributed to
modules through global module hooks (forward) and autograd's node numbers (backward).
Every record has a stable identity: step, phase, module path, op, call index,
and the user-code line that issued it.

Statistics are computed where the tensor lives. On the CPU they are read
directly, in place, by a compiled one-pass kernel (native.py, _stats.c: float32 lane
sums added into float64 per 2048 elements) or, without a C compiler, by numpy sweeps
over cache-sized chunks; on an accelerator each tensor's numbers are stacked into one small
device tensor and the whole batch is copied to the host once per flush (at the
end of each step, or every `flush_every` tensors), never with a per-tensor
`.item()`.
"""

from __future__ import annotations

import fnmatch
import os
import weakref
import zlib
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from accelport.errors import InvalidValue
from accelport.verify.numerics import dumpfile
from accelport.verify.numerics.dump_hooks import CaptureHooks, _no_sequence_nr
from accelport.verify.numerics.dump_ops import (
    _NOT_RUN,
    _RECORDING,
    _describe_args,
    _dtype_name,
    _Entry,
    _generator_crc,
    _host_bytes,
    _json_stats,
    _numel,
    _op_info,
    _replicated,
    _tensors_in,
    _tensors_out,
    _version,
)
from accelport.verify.numerics.dump_stats import STATS_KERNEL_VAR, _Stats
from accelport.verify.numerics.dump_writer import CaptureWriter

# What code outside the capture imports from here (the parts live in dump_hooks, dump_ops,
# dump_stats and dump_writer; recorder.py reads what the compiled path needs from dump_ops).
__all__ = [
    "ENV_VAR", "PHASES", "STATS_KERNEL_VAR", "Capture", "_Stats", "_describe_args", "bootstrap_dir",
    "capture", "parse_steps", "run_callable", "start_from_environment",
]  # fmt: skip


PHASES = ("forward", "backward", "optimizer", "other")
_CACHE_PRUNE = 4096  # cache entries before dead tensors' entries are dropped
# Captures started in this process: a child forked from it (a DataLoader worker) records nothing.
_CAPTURES: weakref.WeakSet = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for cap in list(_CAPTURES):
        cap._live = False
        cap._forked = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def parse_steps(steps: str | tuple[int, int] | range | None) -> tuple[int, int | None]:
    if steps is None:
        return 0, None
    if isinstance(steps, range):
        return steps.start, steps.stop - 1
    if isinstance(steps, tuple):
        return int(steps[0]), None if steps[1] is None else int(steps[1])
    text = str(steps).strip()
    try:
        if ".." in text:
            low, high = text.split("..", 1)
            return int(low or 0), int(high) if high else None
        return int(text), int(text)
    except ValueError:
        raise InvalidValue("steps", text, "not a step range; write N, N..M or N..") from None


class Capture(CaptureHooks, CaptureWriter):
    """An active dump; use through `capture(...)`."""

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        *,
        tensors: bool = False,
        steps: str | tuple[int, int] | range | None = None,
        modules: Sequence[str] = (),
        ops: Sequence[str] = (),
        tensor_modules: Sequence[str] = (),
        tensor_ops: Sequence[str] = (),
        phases: Iterable[str] = ("forward", "backward", "other"),
        checksums: bool = False,
        param_checksums: bool = True,
        step_on: str = "optimizer",
        flush_every: int = 1024,
        stats_on_host: bool = True,
        lazy: bool = False,
        views: bool = False,
        compiled: bool = True,
    ) -> None:
        self.folder = Path(run_dir)
        self.tensors = tensors
        self.first_step, self.last_step = parse_steps(steps)
        self.module_filters = tuple(modules)
        self.op_filters = tuple(ops)
        self.tensor_module_filters = tuple(tensor_modules)
        self.tensor_op_filters = tuple(tensor_ops)
        given = tuple(phases)
        self.phases = frozenset(given)
        unknown = [phase for phase in given if phase not in PHASES]
        if unknown:
            listed = ",".join(map(str, given))
            raise InvalidValue("phases", listed, f"unknown phase {unknown[0]!r}; choose from {', '.join(PHASES)}")
        if step_on not in ("optimizer", "forward", "manual"):
            raise InvalidValue("step_on", step_on, "choose optimizer, forward or manual")
        self.checksums = checksums
        self.param_checksums = param_checksums
        self.step_on = step_on
        self.flush_every = max(1, flush_every)
        self.stats_on_host = stats_on_host
        self.lazy = lazy  # create the folder at the first record (used by the CLI wrapper)
        self.views = views  # record view ops too (see _VIEW_OPS)
        self.compiled = compiled  # per-op path in C where it can be built (recorder.py)
        self.recorder = ""  # which ran: "compiled" or "python" (set at start)
        self.current_step = 0
        self._live = False  # recording now: started, not closed, this process, a step in range (_set_live)
        self._forked = False  # this is a child forked from the process that started the capture
        self._tensor: Any = None  # torch.Tensor, once started
        self._opened = False
        self._closed = False
        self._manifest: dumpfile.ManifestWriter | None = None
        self._store: dumpfile.TensorStore | None = None
        self._seq = 0
        self._records: list[dict[str, Any]] = []  # waiting for device statistics / the next flush
        self._waiting_tensors = 0
        # id(tensor) -> (weak reference, version, entry). No callback per tensor: an entry
        # whose tensor died is never a hit (the reference no longer gives the tensor back)
        # and is dropped when the cache outgrows _cache_limit.
        self._cache: dict[int, tuple[Any, int, _Entry]] = {}
        self._cache_limit = _CACHE_PRUNE
        self._calls: dict[tuple[str, str, str], int] = {}
        # id(module) -> (weak reference, path); the reference tells a reused id from the module.
        self._module_names: dict[int, tuple[Any, str]] = {}
        self._param_names: dict[int, tuple[str, str]] = {}
        self._entered: set[int] = set()  # modules whose parameters were recorded this step
        self._forward_stack: list[str] = []
        # Backward ops are attributed through autograd's sequence numbers: every node
        # created in forward takes the next one, so the module on top of the forward stack
        # when node N was made is the one marked last at or before N (marks: the number at
        # each module entry and exit; marked: the module from there on). This step's marks
        # and the last one's are kept.
        self._marks: list[int] = []
        self._marked: list[str] = []
        self._marks_before = 0  # where this step's marks begin
        self._node_modules: dict[int, tuple[str, str]] = {}  # sequence number -> (module, node name)
        self._sequence_nr: Callable[[], int] = _no_sequence_nr
        self._call_sites: dict[str, str] = {}  # module path -> line that called it
        self._in_optimizer = 0
        # Frames of the optimizer steps running now (their hook wrappers), innermost last: a
        # step that raised never runs its post-hook, and its frame is then off the stack.
        self._optimizer_frames: list[Any] = []
        self._mode_off = False  # dispatch mode taken off the stack while an optimizer step runs
        self._handles: list[Any] = []
        self._mode: Any = None
        self._frame_cache: dict[Any, bool] = {}
        self._lines: dict[tuple[Any, int], str] = {}  # (code, line number) -> "file:line"
        self._lines_cwd = ""
        # id(func) -> (op name, uninitialised, aliasing, same order, expand, view, callable);
        # None for _NOT_NUMERIC ops. Keyed by id: OpOverload.__hash__ is Python code (op
        # objects live for the process).
        self._op_info: dict[int, tuple[str, bool, bool, bool, bool, bool, Any] | None] = {}
        self._filtered = bool(self.module_filters or self.op_filters)
        self._backward = "backward" in self.phases
        self._unresolved: list[dict[str, Any]] = []  # descriptions waiting for device statistics
        self._stats: _Stats | None = None
        self._library_roots: tuple[str, ...] = ()
        self._stdlib = ""
        self._amp_recorded = -1
        self._busy = False  # True while accelport itself runs torch ops (statistics, RNG state)
        self.records_written = 0
        # seq -> what a random op drew: its generator's state before (CRC-32) and its outputs' bits,
        # joined to the op's record at the flush (records are built in C or Python alike).
        self._random: dict[int, dict[str, Any]] = {}
        self._api_calls: dict[Any, str | None] = {}  # code object -> "torch.x.y.fn" (see _api_call)

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> Capture:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        try:
            import torch
            from torch.utils._python_dispatch import TorchDispatchMode  # noqa: F401  (the hooks need it)
        except ImportError:
            from accelport.errors import MissingDependency

            raise MissingDependency("torch", "torch", "accelport dump") from None
        self._torch = torch
        self._C = torch._C
        self._tensor = torch.Tensor
        self._sequence_nr = getattr(torch.autograd, "_get_sequence_nr", _no_sequence_nr)
        self._stats = _Stats(self.stats_on_host)
        self._stdlib = str(Path(os.__file__).parent.resolve()) + os.sep
        self._library_roots = (
            str(Path(torch.__file__).parent.resolve()) + os.sep,
            str(Path(__file__).parents[1].resolve()) + os.sep,
            self._stdlib,
        )
        compiled = self._compiled_recorder()
        self.recorder = "compiled" if compiled is not None else "python"
        if not self.lazy:
            self._open()
        _CAPTURES.add(self)
        _RECORDING.append(self)
        self._set_live()
        self._install_hooks(compiled)

    def _compiled_recorder(self) -> Any:
        """The C version of _on_op (recorder.py) where it applies: statistics measured on the
        host, no tensors saved, no checksums; None otherwise or where it cannot be built."""
        if self.tensors or self.checksums or not self.stats_on_host or not self.compiled:
            return None
        from accelport.verify.numerics import recorder

        return recorder.load()

    def close(self) -> None:
        """Flush everything, write the end record and stop capturing."""
        if self._closed:
            return
        self._closed = True
        self._live = False
        if self in _RECORDING:
            _RECORDING.remove(self)
        # A mode taken off for an optimizer step that raised is simply not put back.
        self._optimizer_frames = []
        self._in_optimizer = 0
        self._remove_hooks()
        if self._stats is not None and self._stats._pool is not None:
            self._stats._pool.shutdown()
        if self._forked or not self._opened:
            return
        self._write_end()

    def step(self) -> None:
        """End the current step: flush its records and start numbering the next one."""
        if self._forked:
            return
        if self._optimizer_frames:
            self._settle_optimizer()
        if self._opened:
            self._flush()
            if self._store is not None:
                self._store.finish_step()
        self.current_step += 1
        self._set_live()
        self._calls.clear()
        self._entered.clear()
        self._cache.clear()
        self._node_modules.clear()
        del self._marks[: self._marks_before], self._marked[: self._marks_before]
        self._marks_before = len(self._marks)

    # -- what is being recorded now ----------------------------------------------------------

    def _set_live(self) -> None:
        self._live = (
            not self._closed
            and not self._forked
            and self.current_step >= self.first_step
            and (self.last_step is None or self.current_step <= self.last_step)
        )

    def _wanted(self, module: str, op: str) -> bool:
        if self.module_filters and not any(
            fnmatch.fnmatchcase(module, p) for p in self.module_filters
        ):
            return False
        return not (
            self.op_filters and not any(fnmatch.fnmatchcase(op, p) for p in self.op_filters)
        )

    def _save_tensors_of(self, module: str, op: str) -> bool:
        if not self.tensors:
            return False
        if self.tensor_module_filters and not any(
            fnmatch.fnmatchcase(module, p) for p in self.tensor_module_filters
        ):
            return False
        return not (
            self.tensor_op_filters
            and not any(fnmatch.fnmatchcase(op, p) for p in self.tensor_op_filters)
        )

    def _run_random(self, call: Any, args: tuple, kwargs: dict) -> Any:
        """Run a random op (inside its record: `_seq` already counts it), noting what it drew.

        Its outputs are compared bit for bit, not by statistics: two dropout masks with the
        same rate have almost the same mean and norm, and the runs would seem to part only
        at the op after it. The generator's state before the op tells a different random
        stream (another seed, another device's generator) from a random op that computes
        differently from the same state.
        """
        seq = self._seq - 1
        state = _generator_crc(self._torch, args, kwargs)
        result = call(*args, **kwargs)
        crcs = []
        for t in _tensors_out(result):
            dtype = _dtype_name(t.dtype)
            crcs.append(zlib.crc32(_host_bytes(t)) if dtype in dumpfile.DTYPES and t.layout == self._torch.strided else None)
        self._random[seq] = {"rng_crc32": state, "out_crc32": crcs}
        return result

    # -- tensors -----------------------------------------------------------------------------

    def _entry(
        self,
        t: Any,
        src: int | None = None,
        fresh: bool = False,
        alias_of: _Entry | None = None,
        same_order: bool = False,
        mutated: bool = False,
    ) -> _Entry:
        """The recorded description of `t`, from the cache while `t` is unchanged.

        mutated: `t` is an input the op just changed (in place, or as out=); torch bumps its
        version counter once the op returns, so the entry is kept under the version to come.
        """
        key = id(t)
        if not fresh:
            hit = self._cache.get(key)
            if hit is not None and hit[0]() is t and hit[1] == t._version:
                return hit[2]
        dtype = _dtype_name(t.dtype)
        shape = list(t.shape)
        if (
            alias_of is not None
            and alias_of.stats is not None
            and t.numel() == _numel(alias_of.shape)
        ):
            entry = _Entry(dtype, shape, alias_of.stats, src)
            if same_order:
                entry.data = alias_of.data
        else:
            assert self._stats is not None
            entry = _Entry(dtype, shape, self._stats.compute(t), src)
        version = _version(t)
        if version is not None:  # (an inference tensor has none: changes to it could not be seen)
            self._remember(t, version + 1 if mutated else version, entry)
        return entry

    def _remember(self, t: Any, version: int, entry: _Entry) -> None:
        """Keep `entry` as the description of `t` while its version counter reads `version`."""
        cache = self._cache
        cache[id(t)] = (weakref.ref(t), version, entry)
        if len(cache) > self._cache_limit:
            self._prune()

    def _desc_of(self, entry: _Entry) -> dict[str, Any]:
        """The entry as records list it when nothing is saved or checksummed: built once, shared."""
        desc = self._new_desc(entry)
        if entry.data:
            desc.update(entry.data)
        entry.desc = desc
        return desc

    def _new_desc(self, entry: _Entry) -> dict[str, Any]:
        """dtype, shape, statistics and where the tensor came from; device statistics are filled in at the flush."""
        stats = entry.stats
        desc: dict[str, Any] = {
            "dtype": entry.dtype,
            "shape": entry.shape,
            "stats": stats if stats is None or isinstance(stats, int) else _json_stats(stats),
        }
        if entry.src is not None:
            desc["src"] = entry.src
        if entry.uninitialised:
            desc["uninitialised"] = True
        if isinstance(stats, int):
            self._unresolved.append(desc)
        return desc

    def _describe(
        self, entry: _Entry, t: Any, save: bool, step: int, key: str, crc: bool = False
    ) -> dict[str, Any]:
        if not (save or crc or self.checksums):
            return entry.desc or self._desc_of(entry)
        out = self._new_desc(entry)
        info = entry.data if entry.data is not None else {}
        need_crc = (self.checksums or crc) and "crc32" not in info
        need_file = save and self._store is not None and "file" not in info
        if (need_crc or need_file) and entry.dtype in dumpfile.DTYPES:
            data = _host_bytes(t)
            info = dict(info)
            if need_crc:
                info["crc32"] = zlib.crc32(data)
            if need_file:
                assert self._store is not None
                file, start, nbytes = self._store.add(step, key, entry.dtype, entry.shape, data)
                info.update({"file": file, "start": start, "nbytes": nbytes})
            entry.data = info
            entry.desc = None  # the shared description lacks the new keys
        if entry.data:
            out.update(entry.data)
        return out

    # -- hooks -------------------------------------------------------------------------------

    def _on_op(self, func: Any, args: tuple, kwargs: dict) -> Any:
        if self._busy or not self._live:
            return func(*args, **kwargs)
        # The phase and module, inline: this runs for every op.
        torch_c = self._C
        node_name = None
        if torch_c._current_graph_task_id() != -1:
            phase = "backward"
            module, node_name = self._backward_module(torch_c._current_autograd_node())
        else:
            if self._in_optimizer:
                phase = "optimizer"
            elif self._forward_stack or torch_c.is_grad_enabled():
                phase = "forward"
            else:
                phase = "other"
            if self._forward_stack:
                module = self._forward_stack[-1]
            elif phase == "forward":
                module = ""
            else:
                module = self._api_call()  # clip_grad_norm_, SGD.step: the call stands for the module
        if phase not in self.phases:
            return func(*args, **kwargs)
        key = id(func)
        info = self._op_info.get(key, False)
        if info is False:
            info = self._op_info[key] = _op_info(func)
        if info is None:  # not numeric
            return func(*args, **kwargs)
        if self._filtered and not self._wanted(module, info[0]):
            return func(*args, **kwargs)
        self._busy = True
        try:
            if info[5] and not self.views:
                result = info[6](*args, **kwargs)
                if self._pass_view(args[0] if args else None, result, info):
                    return result
                # A view this cannot vouch for (see _pass_view): recorded like any op.
                return self._record_op(args, kwargs, phase, info, module, node_name, result)
            return self._record_op(args, kwargs, phase, info, module, node_name)
        finally:
            self._busy = False

    def _pass_view(self, source: Any, result: Any, info: tuple) -> bool:
        """Give a view's output the entry of the tensor it views (statistics, src, saved data).

        Statistics still waiting for a device batch are shared as the index into it (the
        flush fills in every cached entry). False, and nothing cached, when the output is
        not one tensor with the elements of the first argument: the op is then recorded.
        """
        tensor = self._tensor
        if not (isinstance(source, tensor) and isinstance(result, tensor)):
            return False
        # The view shares its source's version counter once the op returns (torch links
        # them above the dispatch mode: inside it the view still shows a counter of its own).
        version = _version(source)
        if version is None:  # an inference tensor: no counter, so no cache; record the view
            return False
        hit = self._cache.get(id(source))
        if hit is not None and hit[0]() is source and hit[1] == version:
            base = hit[2]
        else:
            base = self._entry(source)
        if info[4]:  # expand
            entry = _replicated(base, [result]) if isinstance(base.stats, list) else None
            if entry is None:  # statistics still on the device (or none): measure the output
                assert self._stats is not None
                entry = _Entry(_dtype_name(result.dtype), list(result.shape), self._stats.compute(result), None)
        elif result.numel() == source.numel():
            entry = _Entry(_dtype_name(result.dtype), list(result.shape), base.stats, None)
        else:
            return False
        entry.src = base.src
        entry.uninitialised = base.uninitialised
        if info[3]:  # same element order: with full tensors, the saved bytes are the view's too
            entry.data = base.data
        self._remember(result, version, entry)
        return True

    def _prune(self) -> None:
        """Drop the cache entries of tensors that no longer exist."""
        cache = self._cache
        for key in [key for key, hit in cache.items() if hit[0]() is None]:
            del cache[key]
        self._cache_limit = max(_CACHE_PRUNE, 2 * len(cache))

    def _record_op(
        self,
        args: tuple,
        kwargs: dict,
        phase: str,
        info: tuple,
        module: str,
        node_name: str | None,
        result: Any = _NOT_RUN,
    ) -> Any:
        """Record one op and return its result; `result`: the op already ran (a view, which changes no input)."""
        op, run_op = info[0], info[6]
        if not self._opened:
            self._open()
        save = self.tensors and self._save_tensors_of(module, op)
        # Nothing saved or checksummed (statistics mode): each tensor's description is
        # built once and shared by every record that lists it.
        shared = not (save or self.checksums)
        inputs = _tensors_in(args, kwargs)
        cache = self._cache
        entry_of = self._entry
        in_entries = []
        for t in inputs:
            hit = cache.get(id(t))
            if hit is not None and hit[0]() is t and hit[1] == t._version:
                in_entries.append(hit[2])
            else:
                in_entries.append(entry_of(t))
        # In-place ops change their inputs: describe (and save) them before the op runs.
        seq = self._seq
        self._seq = seq + 1
        step = self.current_step
        describe = self._describe
        if shared:
            desc_of = self._desc_of
            in_desc = [e.desc or desc_of(e) for e in in_entries]
        else:
            in_desc = [
                describe(e, t, save, step, f"{seq}.in.{i}" if save else "")
                for i, (t, e) in enumerate(zip(inputs, in_entries, strict=True))
            ]
        if result is _NOT_RUN:
            result = run_op(*args, **kwargs)
        outputs = _tensors_out(result)
        out_desc = self._output_descs(outputs, inputs, in_entries, seq, info, save, step)
        line = self._user_line() if phase != "backward" else self._call_sites.get(module)
        calls = self._calls
        call_key = (phase, module, op)
        call = calls.get(call_key, 0)
        calls[call_key] = call + 1
        # The identity (as _identity builds it), then what the op did.
        record = {
            "k": "op",
            "seq": seq,
            "step": step,
            "phase": phase,
            "op": op,
            "module": module,
            "call": call,
            "line": line,
            "args": _describe_args(args, kwargs),
            "in": in_desc,
            "out": out_desc,
        }
        if node_name is not None:
            record["node"] = node_name
        self._records.append(record)
        self._waiting_tensors += len(in_desc) + len(out_desc)
        if self._waiting_tensors >= self.flush_every:
            self._flush()
        return result

    def _output_descs(
        self,
        outputs: list[Any],
        inputs: list[Any],
        in_entries: list[_Entry],
        seq: int,
        info: tuple,
        save: bool = False,
        step: int = 0,
    ) -> list[dict[str, Any]]:
        """The descriptions of an op's outputs (measured, or shared with the input they alias), each cached."""
        _op, uninitialised, aliasing, same_order, expand, _view, _run = info
        shared = not (save or self.checksums)
        alias = in_entries[0] if aliasing and in_entries else None
        if expand and in_entries and isinstance(in_entries[0].stats, list):
            alias = _replicated(in_entries[0], outputs)
        out_desc = []
        for i, t in enumerate(outputs):
            if uninitialised:
                entry = _Entry(_dtype_name(t.dtype), list(t.shape), None, seq)
                entry.uninitialised = True
                desc: dict[str, Any] = {
                    "dtype": entry.dtype,
                    "shape": entry.shape,
                    "stats": None,
                    "uninitialised": True,
                }
                version = _version(t)
                if version is not None:
                    self._remember(t, version, entry)
            else:
                mutated = False
                for u in inputs:
                    if u is t:
                        mutated = True
                        break
                entry = self._entry(t, src=seq, fresh=True, alias_of=alias, same_order=same_order,
                                    mutated=mutated)  # fmt: skip
                if shared:
                    desc = self._desc_of(entry)
                else:
                    desc = self._describe(entry, t, save, step, f"{seq}.out.{i}" if save else "")
            out_desc.append(desc)
        return out_desc

    def _compute(self, t: Any) -> Any:
        """The statistics of a tensor (the compiled recorder asks for those it does not measure itself)."""
        assert self._stats is not None
        return self._stats.compute(t)

    def _leaf_record(self, kind: str, module: str, name: str, tensor: Any, phase: str) -> None:
        """A parameter, gradient or model input: checked before any op that uses it."""
        if phase not in self.phases and kind != "param":
            return
        op = f"{kind}:{name}"
        if not self._wanted(module, op):
            return
        self._open()
        seq = self._seq
        self._seq += 1
        step = self.current_step
        entry = self._entry(tensor, src=seq, fresh=True)
        save = self._save_tensors_of(module, op)
        record = self._identity(kind, seq, step, phase, op, module, self._call_sites.get(module))
        # Parameters at the first step and model inputs carry a CRC-32: the two runs must
        # start from the same bits, and a checksum proves they did (or did not).
        crc = self.param_checksums and (kind == "input" or step == 0)
        record["out"] = [self._describe(entry, tensor, save, step, f"{seq}.out.0", crc=crc)]
        self._emit(record, 1)


def capture(run_dir: str | os.PathLike[str], **options: Any) -> Capture:
    """Record every op, parameter and input of the code run inside the `with` block into `run_dir`.

    Options: tensors (save full tensors), steps ("N..M"), modules / ops (glob filters on what is
    recorded), tensor_modules / tensor_ops (globs on which records keep full tensors), phases,
    checksums (CRC-32 of every tensor), step_on ("optimizer", "forward" or "manual").
    """
    return Capture(run_dir, **options)



def run_callable(run_dir: str | os.PathLike[str], fn: Callable[[], Any], **options: Any) -> Any:
    """Run `fn()` under a capture (convenience for scripts and tests)."""
    with capture(run_dir, **options):
        return fn()


ENV_VAR = "ACCELPORT_DUMP"


def bootstrap_dir() -> Path:
    """The folder whose sitecustomize.py starts a capture in every Python process of a wrapped command."""
    return Path(__file__).parent / "_bootstrap"


def start_from_environment() -> Capture | None:
    """Start the capture described by $ACCELPORT_DUMP (JSON written by `accelport dump`), closed at exit.

    Each rank of a distributed run writes its own folder (rankN). Another Python process of
    the same command that records ops after the folder is taken (a launcher, a spawned
    worker) writes to pidN inside it; a process forked from a capturing one (a DataLoader
    worker) records nothing. Folders are created at the first record, so a process that
    runs no torch op leaves nothing.
    """
    import atexit
    import json
    import signal

    options = json.loads(os.environ[ENV_VAR])
    folder = Path(options.pop("dir"))
    if "RANK" in os.environ:
        folder = folder / f"rank{os.environ['RANK']}"
    if (folder / dumpfile.MANIFEST).exists():
        folder = folder / f"pid{os.getpid()}"
    cap = Capture(folder, lazy=True, **options)
    cap.start()
    atexit.register(cap.close)
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):

        def on_term(signum: int, frame: Any) -> None:
            cap.close()
            raise SystemExit(128 + signum)

        signal.signal(signal.SIGTERM, on_term)
    return cap
