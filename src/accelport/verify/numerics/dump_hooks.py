"""How a capture sees the run: its dispatch mode and module and optimizer hooks, and the
identity they give each record (module path, call index, source line, the torch call made)."""

from __future__ import annotations

import bisect
import logging
import os
import sys
import weakref
from typing import Any

from accelport.verify.numerics.dump_ops import _tensors_in

log = logging.getLogger(__name__)

_MARKS_KEPT = 1 << 20  # module marks kept when no step ever ends (see Capture._mark)


class CaptureHooks:
    """The part of Capture (dump.py) that hooks into torch and names what it sees; its state
    lives on the capture, set up by Capture.__init__ and start()."""

    def _install_hooks(self, compiled: Any) -> None:
        """Push the dispatch mode (`compiled`: the C recorder's module, else Capture._on_op) and
        register the global module and optimizer hooks."""
        from torch.utils._python_dispatch import TorchDispatchMode

        compiled_on_op = compiled.on_op if compiled is not None else None
        capture = self

        class _Mode(TorchDispatchMode):
            if compiled is None:

                def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                    return capture._on_op(func, args, kwargs or {})

            else:

                def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                    return compiled_on_op(capture, func, args, kwargs or {})

        self._mode = _Mode()
        self._mode.__enter__()
        from torch.nn.modules import module as nn_module

        self._handles.append(nn_module.register_module_forward_pre_hook(self._on_module_enter))
        self._handles.append(
            nn_module.register_module_forward_hook(self._on_module_exit, always_call=True)
        )
        from torch.optim import optimizer as optim

        self._handles.append(optim.register_optimizer_step_pre_hook(self._on_optimizer_pre))
        self._handles.append(optim.register_optimizer_step_post_hook(self._on_optimizer_post))

    def _remove_hooks(self) -> None:
        """Pop the dispatch mode (unless an optimizer step took it off) and remove the hooks."""
        if self._mode is not None and not self._mode_off:
            try:
                self._mode.__exit__(None, None, None)
            except (
                RuntimeError,
                IndexError,
                AssertionError,
            ):  # the mode stack was left inconsistent by the user
                log.warning("dump: dispatch mode was not on top of the stack at close")
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _user_line(self) -> str | None:
        """file:line of the innermost frame outside torch, accelport and the standard library."""
        frame = sys._getframe(2)
        cache = self._frame_cache
        while frame is not None:
            code = frame.f_code
            library = cache.get(code)
            if library is None:
                library = self._library_code(code)
            if not library:
                # Built once per code location (the path is relative to the working
                # directory: a chdir starts the table again).
                cwd = os.getcwd()
                if cwd != self._lines_cwd:
                    self._lines_cwd = cwd
                    self._lines.clear()
                where = (code, frame.f_lineno)
                line = self._lines.get(where)
                if line is None:
                    line = self._line_text(code, where[1])
                return line
            frame = frame.f_back
        return None

    def _api_call(self) -> str:
        """For an op outside every module (gradient clipping, an optimizer's step, zero_grad): the
        torch function the user called, as `torch.nn.utils.clip_grad.clip_grad_norm_` or
        `torch.optim.sgd.SGD.step`; "" when the user's own code issued the op.

        The outermost public torch function between the op and the user's frame: inner helpers
        (`_clip_grads_with_norm_`, `_single_tensor_sgd`) and wrappers (`<locals>`) are skipped.
        """
        frame = sys._getframe(1)
        found = ""
        cache = self._api_calls
        torch_root = self._library_roots[0]
        while frame is not None:
            code = frame.f_code
            library = self._frame_cache.get(code)
            if library is None:
                library = self._library_code(code)
            if not library:
                return found
            name = cache.get(code, False)
            if name is False:
                name = cache[code] = _public_torch_name(code, torch_root)
            if name:
                found = name
            frame = frame.f_back
        return found

    def _library_code(self, code: Any) -> bool:
        """Is this code torch's, accelport's or the standard library's (not the user's)? Cached per code object."""
        filename = code.co_filename
        path = os.path.abspath(filename)
        library = filename.startswith("<") or (
            path.startswith(self._library_roots)
            and not (path.startswith(self._stdlib) and "-packages" in path)
        )
        self._frame_cache[code] = library
        return library

    def _line_text(self, code: Any, line: int) -> str:
        """"file:line" of a code location, relative to the working directory; kept in _lines."""
        text = self._lines[(code, line)] = f"{_short_path(code.co_filename)}:{line}"
        return text

    def _call_index(self, phase: str, module: str, op: str) -> int:
        key = (phase, module, op)
        index = self._calls.get(key, 0)
        self._calls[key] = index + 1
        return index

    def _identity(
        self, kind: str, seq: int, step: int, phase: str, op: str, module: str, line: str | None
    ) -> dict[str, Any]:
        """What makes a record findable in both runs: step, phase, module, op, call index, source line."""
        return {
            "k": kind,
            "seq": seq,
            "step": step,
            "phase": phase,
            "op": op,
            "module": module,
            "call": self._call_index(phase, module, op),
            "line": line,
        }

    def _name_of(self, mod: Any) -> str:
        names = self._module_names
        hit = names.get(id(mod))
        if hit is not None and hit[0]() is mod:
            return hit[1]
        if self._forward_stack:
            # A module the root did not register (created on the fly): name it under its caller.
            name = f"{self._forward_stack[-1]}.<{type(mod).__name__}>"
        else:
            root = type(mod).__name__
            for child_name, child in mod.named_modules(remove_duplicate=False):
                known = names.get(id(child))
                if known is None or known[0]() is not child:
                    names[id(child)] = (weakref.ref(child), f"{root}.{child_name}" if child_name else root)
            for param_name, param in mod.named_parameters(remove_duplicate=False):
                owner, _, leaf = param_name.rpartition(".")
                self._param_names.setdefault(
                    id(param), (f"{root}.{owner}" if owner else root, leaf)
                )
            name = names[id(mod)][1]
        names[id(mod)] = (weakref.ref(mod), name)
        return name

    def _on_module_enter(self, mod: Any, args: tuple) -> None:
        if self._optimizer_frames:
            self._settle_optimizer()
            if self._mode_off:
                # A module running inside optimizer.step (not through a closure): record
                # as without the shortcut.
                self._resume_mode()
        if self._busy or not self._live:
            return
        self._busy = True
        try:
            self._module_enter(mod, args)
        finally:
            self._busy = False

    def _module_enter(self, mod: Any, args: tuple) -> None:
        is_root = not self._forward_stack
        name = self._name_of(mod)
        if is_root and self.step_on == "forward" and self._seq and id(mod) in self._entered:
            self.step()
            if not self._live:
                return
        if name not in self._call_sites:
            self._call_sites[name] = self._user_line() or ""
        self._forward_stack.append(name)
        if self._amp_recorded != self.current_step:
            self._amp_recorded = self.current_step
            self._record_step_start()
        if id(mod) not in self._entered:
            self._entered.add(id(mod))
            for pname, param in mod.named_parameters(recurse=False):
                self._leaf_record("param", name, pname, param, "forward")
            if is_root:
                for index, tensor in enumerate(_tensors_in(args, {})):
                    self._leaf_record("input", name, str(index), tensor, "forward")
        self._mark(name)

    def _on_module_exit(self, mod: Any, args: tuple, output: Any) -> None:
        if self._busy or not self._forward_stack or self._forked:
            return
        self._forward_stack.pop()
        self._mark(self._forward_stack[-1] if self._forward_stack else "")

    def _mark(self, module: str) -> None:
        """From autograd's next sequence number on, new nodes are `module`'s."""
        number = self._sequence_nr()
        marks = self._marks
        if marks and marks[-1] == number:
            # No node made since the last mark (no grad, or a module with no ops): that
            # mark says nothing any more. So with gradients off the list never grows.
            self._marked[-1] = module
            return
        marks.append(number)
        self._marked.append(module)
        if len(marks) > _MARKS_KEPT:  # a run that never ends a step: keep the newer half
            half = len(marks) // 2
            del marks[:half], self._marked[:half]
            self._marks_before = max(0, self._marks_before - half)

    def _backward_module(self, node: Any) -> tuple[str, str | None]:
        """The module whose forward made the autograd node now running, and the node's name.

        A gradient accumulator (AccumulateGrad) is made for its parameter, not by an op:
        it belongs to the parameter's module.
        """
        if node is None:
            return "", None
        number = node._sequence_nr()
        known = self._node_modules.get(number)
        if known is not None:
            return known
        name = node.name()
        variable = getattr(node, "variable", None) if name.endswith("AccumulateGrad") else None
        if variable is not None:
            # Every accumulator has the same (largest) number: not cached by it.
            return self._param_names.get(id(variable), ("", ""))[0], name
        at = bisect.bisect_right(self._marks, number) - 1
        known = self._node_modules[number] = (self._marked[at] if at >= 0 else "", name)
        return known

    def _on_optimizer_pre(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self._optimizer_frames:
            self._settle_optimizer()
        self._optimizer_frames.append(sys._getframe(1))  # the wrapper that runs the step
        self._in_optimizer = len(self._optimizer_frames)
        if self._busy or not self._live:
            return
        if "optimizer" not in self.phases:
            # None of the step's own ops will be recorded: take the dispatch mode off the
            # stack while it runs, so they do not each pay a Python round trip. Not with a
            # closure (LBFGS): it runs forward and backward, whose ops are recorded.
            closure = any(callable(v) for v in args[1:]) or any(
                callable(v) for v in kwargs.values()
            )
            if self._in_optimizer == 1 and not closure:
                self._suspend_mode()
            return
        self._busy = True
        try:
            self._record_grads(optimizer)
        finally:
            self._busy = False

    def _settle_optimizer(self) -> None:
        """Forget optimizer steps that are over (one that raised never ran its post-hook).

        Puts the dispatch mode back once no step is running.
        """
        frames = self._optimizer_frames
        if frames:
            live = set()
            frame = sys._getframe(1)
            while frame is not None:
                live.add(id(frame))
                frame = frame.f_back
            while frames and id(frames[-1]) not in live:
                frames.pop()
        self._in_optimizer = len(frames)
        if not frames and self._mode_off:
            self._resume_mode()

    def _suspend_mode(self) -> None:
        from torch.utils._python_dispatch import _get_current_dispatch_mode

        # Only when it is on top: another mode pushed above it stays where it is.
        if self._mode is not None and _get_current_dispatch_mode() is self._mode:
            self._mode.__exit__(None, None, None)
            self._mode_off = True

    def _resume_mode(self) -> None:
        if self._mode_off:
            self._mode_off = False
            if not self._closed:
                self._mode.__enter__()

    def _record_grads(self, optimizer: Any) -> None:
        for group in optimizer.param_groups:
            for param in group["params"]:
                if param.grad is None:
                    continue
                module, name = self._param_names.get(id(param), ("", f"param{id(param):x}"))
                self._leaf_record("grad", module, name, param.grad, "optimizer")

    def _on_optimizer_post(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self._optimizer_frames:
            self._optimizer_frames.pop()
            self._settle_optimizer()
        if self.step_on == "optimizer" and not self._forked:
            self.step()


def _no_sequence_nr() -> int:
    """Stands in for torch.autograd._get_sequence_nr where torch lacks it: past every node's
    number, so no mark precedes a node and backward ops have no module."""
    return 1 << 64


def _short_path(filename: str) -> str:
    cwd = os.getcwd() + os.sep
    return filename[len(cwd) :] if filename.startswith(cwd) else filename


def _public_torch_name(code: Any, torch_root: str) -> str | None:
    """`torch.nn.utils.clip_grad.clip_grad_norm_` for a public function or method of torch; None for
    anything else (a private helper, a local wrapper, code outside torch)."""
    path = os.path.abspath(code.co_filename)
    if not path.startswith(torch_root):
        return None
    qualname = getattr(code, "co_qualname", code.co_name)
    if "<" in qualname or any(part.startswith("_") for part in qualname.split(".")):
        return None
    module = path[len(torch_root) :].removesuffix(".py").replace(os.sep, ".").removesuffix(".__init__")
    if any(part.startswith("_") for part in module.split(".")):
        return None  # torch._tensor, torch.utils._contextlib: machinery, not what the user called
    return f"torch.{module}.{qualname}"

