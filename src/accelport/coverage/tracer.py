"""Record the ATen operators one training or inference step runs, without the target hardware.

The step runs under a `TorchDispatchMode` that sees every operator after autograd and
composite decomposition, with its exact overload. Strategies, cheapest first:

* meta: the model is built on the meta device, so no weight memory and no arithmetic;
* fake: FakeTensorMode with a ShapeEnv, for data-dependent operators (masks, nonzero) and
  for inference, where tensors must claim a real device type to take the fused fast paths
  an accelerator takes (`_transformer_encoder_layer_fwd`, `_native_multi_head_attention`);
* cpu: a real CPU run, when neither works (Python branches on `.item()`).
"""

from __future__ import annotations

import logging
import os
import sys
import sysconfig
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from accelport.coverage.probe import Probe
from accelport.coverage.records import (
    HOST,
    NOISE_NAMESPACES,
    SDPA,
    Attempt,
    OpRecord,
    Site,
    Trace,
    canonical,
)
from accelport.coverage.workload import Workload, as_workload, load_factory
from accelport.errors import UserError

log = logging.getLogger(__name__)

LADDERS = {"train": ("meta", "fake", "cpu"), "infer": ("fake", "cpu")}

# The fused inference fast paths of nn.TransformerEncoderLayer / nn.MultiheadAttention run only
# when the input's device type is one torch names there (torch/nn/modules/transformer.py and
# activation.py, torch 2.6 to 2.13: "cpu", "cuda", "xpu" and the PrivateUse1 backend's name).
# Out-of-tree backends (npu, musa, mlu, gcu, supa) register as PrivateUse1 and take them; the
# in-tree device types below do not, so a target of theirs runs the unfused ops instead.
FASTPATH_DEVICES = frozenset({"cpu", "cuda", "xpu"})
IN_TREE_DEVICES = frozenset({"mps", "hpu", "mtia", "xla", "lazy", "ipu", "ve", "vulkan", "maia", "meta", "fpga"})


def takes_fastpath(device_type: str) -> bool:
    """Whether torch takes the fused transformer fast paths for tensors of `device_type`."""
    return device_type in FASTPATH_DEVICES or device_type not in IN_TREE_DEVICES


@contextmanager
def _fastpath(enabled: bool) -> Iterator[None]:
    """torch.backends.mha's fast-path switch set to `enabled` for the block, then restored."""
    import torch

    before = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(enabled)
    try:
        yield
    finally:
        torch.backends.mha.set_fastpath_enabled(before)
STRATEGIES = ("meta", "fake", "cpu")
_NO_SEQUENCE = 2**64 - 1  # AccumulateGrad nodes carry no sequence number


class _Attribution:
    """Which module and which line of user code issued an operator, forward and backward."""

    def __init__(self) -> None:
        import torch

        self.torch = torch
        self.stack: list[Any] = []
        self.names: dict[int, str] = {}
        self.param_modules: dict[int, str] = {}
        self.forward_sites: dict[int, Site] = {}
        self.region_nodes: dict[int, str] = {}
        self.phase = "forward"
        self.autocast = False  # a module ran under autocast (which casts nothing on meta)
        self._code_kind: dict[Any, str] = {}
        self.skip_codes: set[Any] = set()  # wrappers of ours that sit between user code and torch
        self._torch_dir = os.path.dirname(os.path.realpath(torch.__file__)) + os.sep
        self._accelport_dir = os.path.dirname(os.path.dirname(os.path.realpath(__file__))) + os.sep
        stdlib = sysconfig.get_paths().get("stdlib") or ""
        self._stdlib_dir = os.path.realpath(stdlib) + os.sep if stdlib else None
        self._cwd = os.getcwd()

    def name_modules(self, model: Any) -> None:
        for name, module in model.named_modules():
            label = f"{name} ({type(module).__name__})" if name else type(module).__name__
            self.names.setdefault(id(module), label)
            for param in module.parameters(recurse=False):
                self.param_modules.setdefault(id(param), label)

    def module_label(self) -> str:
        if not self.stack:
            return ""
        module = self.stack[-1]
        return self.names.get(id(module)) or type(module).__name__

    # -- user code location

    def _classify(self, filename: str) -> str:
        if filename.startswith("<"):
            return "skip"
        path = os.path.realpath(filename)
        if path.startswith(self._torch_dir):
            return "skip"
        if path.startswith(self._accelport_dir):
            return "stop"  # reached the code that runs the step: no user line above the library
        if self._stdlib_dir and path.startswith(self._stdlib_dir) and "site-packages" not in path:
            return "skip"
        return "user"

    def location(self, depth: int = 2) -> str:
        frame = sys._getframe(depth)
        while frame is not None:
            code = frame.f_code
            kind = "skip" if code in self.skip_codes else self._code_kind.get(code)
            if kind is None:
                kind = self._code_kind[code] = self._classify(code.co_filename)
            if kind == "user":
                filename = code.co_filename
                if filename.startswith(self._cwd + os.sep):
                    filename = os.path.relpath(filename, self._cwd)
                return f"{filename}:{frame.f_lineno}"
            if kind == "stop":
                return ""
            frame = frame.f_back
        return ""

    # -- the site of one call

    def site(self) -> tuple[Site, str]:
        """The site of the operator being dispatched now, and the region it belongs to."""
        node = self.torch._C._current_autograd_node()
        if node is not None:
            sequence = node._sequence_nr()
            if sequence == _NO_SEQUENCE:
                variable = getattr(node, "variable", None)
                module = self.param_modules.get(id(variable), "") if variable is not None else ""
                return Site(module, "", "backward"), ""
            forward = self.forward_sites.get(sequence)
            region = self.region_nodes.get(sequence, "")
            if forward is None:
                return Site("", "", "backward"), region
            return Site(forward.module, forward.location, "backward"), region
        site = Site(self.module_label(), self.location(depth=4), self.phase)
        if self.phase == "forward":
            # The autograd node of this call (if it made one) took the number just before the
            # current one; the first call to see a number is the one that made that node.
            self.forward_sites.setdefault(self.torch._C._autograd._get_sequence_nr() - 1, site)
        return site, ""


def _signature(torch: Any, args: tuple, kwargs: dict) -> tuple[str, bool]:
    """The dtypes of the tensor arguments ("float32,[float32]") and whether every one of them is on the CPU."""
    parts = []
    on_cpu = True
    seen = False
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            parts.append(str(value.dtype).removeprefix("torch."))
            seen = True
            on_cpu = on_cpu and value.device.type == "cpu"
        elif isinstance(value, list | tuple) and value and isinstance(value[0], torch.Tensor):
            tensors = [t for t in value if isinstance(t, torch.Tensor)]
            parts.append("[" + "|".join(sorted({str(t.dtype).removeprefix("torch.") for t in tensors})) + "]")
            seen = True
            on_cpu = on_cpu and all(t.device.type == "cpu" for t in tensors)
    return ",".join(parts) or "-", seen and on_cpu


def _recorder_class():
    from torch.utils._python_dispatch import TorchDispatchMode

    class Recorder(TorchDispatchMode):
        """Counts every operator call with its site; keeps one meta sample of the arguments per op and dtypes."""

        def __init__(self, attribution: _Attribution, probe: Probe, device: str) -> None:
            super().__init__()
            import torch

            self.torch = torch
            # On meta, a call whose tensors are all on the CPU is host work (an optimizer's step
            # counters, say): it runs on the CPU on an accelerator too and is not judged.
            self.spot_host = device != "cpu"
            self.attribution = attribution
            self.probe = probe
            self.records: dict[tuple[str, str], OpRecord] = {}
            self.region = ""
            self.last = ""

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func.namespace not in NOISE_NAMESPACES:
                self.note(func, args, kwargs)
            return func(*args, **kwargs)

        def note(self, func: Any, args: tuple, kwargs: dict, name: str | None = None) -> None:
            op = name or canonical(func)
            self.last = op
            site, region = self.attribution.site()
            dtypes, on_cpu = _signature(self.torch, args, kwargs)
            region = region or self.region or (HOST if self.spot_host and on_cpu else "")
            record = self.records.get((op, region))
            if record is None:
                record = self.records[(op, region)] = OpRecord(op=op, region=region)
            if dtypes not in record.dtypes and not region:
                self.probe.keep(op, func, args, kwargs, dtypes)
            record.add(site, dtypes)

    return Recorder


def _fused_layout_grad():
    """An identity whose backward hands back gradients in the input's own strides, as fused SDPA kernels do
    (the math path returns contiguous ones, which changes the reshapes autograd runs upstream)."""
    import torch

    class FusedLayoutGrad(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: Any) -> Any:
            ctx.layout = (tuple(x.shape), tuple(x.stride()))
            return x.view_as(x)

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            shape, stride = ctx.layout
            if tuple(grad.stride()) == stride:
                return grad
            return torch.empty_strided(shape, stride, dtype=grad.dtype, device=grad.device).copy_(grad)

    return FusedLayoutGrad


@contextmanager
def _sdpa_region(recorder: Any, attribution: _Attribution) -> Iterator[None]:
    """Fold what scaled_dot_product_attention runs on the tracing device into the one operator the user called.

    On meta it runs the math path, on CPU a CPU-only flash kernel; an accelerator runs its own
    fused kernel. The backend is judged on `scaled_dot_product_attention` itself (a composite
    every backend can run); the calls inside are kept, marked, for the report. Output and input
    gradients get the memory layout fused kernels give them (output (B, L, H, E) in memory,
    viewed as (B, H, L, E); gradients in their input's strides), so the reshapes around
    attention are those an accelerator runs, whichever path ran here.
    """
    import torch
    import torch.nn.functional as F

    original = F.scaled_dot_product_attention
    sequence = torch._C._autograd._get_sequence_nr
    op = torch.ops.aten.scaled_dot_product_attention.default
    layout_grad = _fused_layout_grad()

    def fused_layout(value: Any) -> Any:
        if isinstance(value, torch.Tensor) and value.requires_grad and value.dim() == 4 and torch.is_grad_enabled():
            return layout_grad.apply(value)
        return value

    def scaled_dot_product_attention(*args: Any, **kwargs: Any) -> Any:
        recorder.note(op, args, kwargs, name=SDPA)
        outer, recorder.region = recorder.region, SDPA
        first = sequence()
        try:
            args = tuple(fused_layout(a) if i < 3 else a for i, a in enumerate(args))
            kwargs = {k: fused_layout(v) if k in ("query", "key", "value") else v for k, v in kwargs.items()}
            output = original(*args, **kwargs)
            if isinstance(output, torch.Tensor) and output.dim() == 4 and not output.transpose(1, 2).is_contiguous():
                output = output.transpose(1, 2).contiguous().transpose(1, 2)
            return output
        finally:
            recorder.region = outer
            for node in range(first, sequence()):
                attribution.region_nodes[node] = SDPA

    attribution.skip_codes.add(scaled_dot_product_attention.__code__)
    F.scaled_dot_product_attention = scaled_dot_product_attention
    try:
        yield
    finally:
        F.scaled_dot_product_attention = original


@contextmanager
def _global_hooks(attribution: _Attribution, notes: list[str]) -> Iterator[None]:
    """Module stack for attribution, and the optimizer phase (foreach forced on, as on accelerators)."""
    from torch.nn.modules import module as nn_module
    from torch.optim import optimizer as optim_module

    def pre_forward(module: Any, args: Any) -> None:
        attribution.stack.append(module)
        if not attribution.autocast:
            attribution.autocast = attribution.torch._C._is_any_autocast_enabled()

    def post_forward(module: Any, args: Any, output: Any) -> None:
        while attribution.stack:
            if attribution.stack.pop() is module:
                break

    def pre_step(optimizer: Any, args: Any, kwargs: Any) -> None:
        attribution.phase = "optimizer"
        attribution.stack.append(optimizer)
        for group in optimizer.param_groups:
            if "foreach" in group and group["foreach"] is None and not group.get("fused"):
                group["foreach"] = True
                note = f"{type(optimizer).__name__}: traced with foreach=True, the default on accelerators"
                if note not in notes:
                    notes.append(note)

    def post_step(optimizer: Any, args: Any, kwargs: Any) -> None:
        attribution.phase = "forward"
        if attribution.stack and attribution.stack[-1] is optimizer:
            attribution.stack.pop()

    handles = [
        nn_module.register_module_forward_pre_hook(pre_forward),
        nn_module.register_module_forward_hook(post_forward, always_call=True),
        optim_module.register_optimizer_step_pre_hook(pre_step),
        optim_module.register_optimizer_step_post_hook(post_step),
    ]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


# --------------------------------------------------------------------------- running one step


@contextmanager
def _keep_rng() -> Iterator[None]:
    """The trace draws random numbers (dropout, initialisation); the caller's CPU generator must not notice.
    (torch.random.fork_rng also touches the current accelerator's module, which a bare backend may lack.)"""
    import torch

    state = torch.get_rng_state()
    try:
        yield
    finally:
        torch.set_rng_state(state)


class _StageError(Exception):
    """An exception raised by one of the user's callables (factory, loss, step), named for the report."""

    def __init__(self, stage: str, exc: BaseException) -> None:
        super().__init__(f"{stage} raised {_describe(exc)}")
        self.stage = stage
        self.original = exc


def _describe(exc: BaseException) -> str:
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if len(message) > 160:
        message = message[:157] + "..."
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def _callable_name(value: Any) -> str:
    name = getattr(value, "__qualname__", None) or getattr(type(value), "__qualname__", None) or repr(value)
    module = getattr(value, "__module__", None)
    return f"{module}.{name}" if module and not module.startswith("accelport_factory_") and module != "builtins" else name


def _call_factory(factory: Callable[[], Any], spec: str) -> Any:
    """Call the user's factory; what it raises is named as the factory's error."""
    try:
        return factory()
    except UserError:
        raise
    except Exception as exc:
        raise _StageError("the factory", exc) from exc


@contextmanager
def _quiet_torch() -> Iterator[list[str]]:
    """Keep the terminal clean while tracing: torch warns and logs about meta and fake tensors
    (and the factory runs several times), none of which is about the user's step.

    Python warnings are caught and torch's loggers raised to ERROR, both restored afterwards;
    the distinct warnings are yielded so the caller can log them at debug level (-vv).
    """
    seen: list[str] = []
    loggers = [logging.getLogger("torch")] + [
        logger
        for name, logger in logging.Logger.manager.loggerDict.items()
        if isinstance(logger, logging.Logger) and name.startswith("torch.")
    ]
    levels = [(logger, logger.level) for logger in loggers]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for logger, _ in levels:
            logger.setLevel(logging.ERROR)
        try:
            yield seen
        finally:
            for logger, level in levels:
                logger.setLevel(level)
            for warning in caught:
                text = f"{warning.category.__name__}: {warning.message}"
                if text not in seen:
                    seen.append(text)


def _call_model(model: Any, inputs: Any) -> Any:
    if isinstance(inputs, dict):
        return model(**inputs)
    if isinstance(inputs, list | tuple):
        return model(*inputs)
    return model(inputs)


def _default_loss(torch: Any, output: Any, notes: list[str], spec: str) -> Any:
    if isinstance(output, torch.Tensor):
        if output.dim() == 0:
            return output
        notes.append("loss: output.float().mean() (the factory gave no loss function)")
        return output.float().mean()
    loss = getattr(output, "loss", None)
    if loss is None and isinstance(output, dict):
        loss = output.get("loss")
    if isinstance(loss, torch.Tensor):
        return loss
    if isinstance(output, list | tuple) and output and isinstance(output[0], torch.Tensor):
        return _default_loss(torch, output[0], notes, spec)
    raise UserError(
        f"{spec}: cannot make a loss from a model output of type {type(output).__name__}; "
        "return (model, inputs, loss_fn) from the factory"
    )


def _run_step(
    torch: Any, workload: Workload, mode: str, recorder: Any, attribution: _Attribution, notes: list[str], spec: str
) -> None:
    if workload.step is not None:
        with recorder:
            try:
                workload.step()
            except Exception as exc:
                raise _StageError(f"the step function {_callable_name(workload.step)}", exc) from exc
        return
    model = workload.model
    if mode == "infer":
        with torch.no_grad(), recorder:
            _call_model(model, workload.inputs)
        return
    params = [p for p in model.parameters() if p.requires_grad]
    if workload.optimizer is not None:
        optimizer = workload.optimizer(params)
    else:
        optimizer = torch.optim.AdamW(params, lr=1e-3, foreach=True) if params else None
        notes.append("optimizer: AdamW(foreach=True) (the factory gave none)")
    with recorder:
        output = _call_model(model, workload.inputs)
        if workload.loss is None:
            loss = _default_loss(torch, output, notes, spec)
        else:
            try:
                loss = workload.loss(output) if workload.targets is None else workload.loss(output, workload.targets)
            except Exception as exc:
                raise _StageError(f"the loss function {_callable_name(workload.loss)}", exc) from exc
        attribution.phase = "backward"  # the gradient seed is made before the autograd engine starts
        loss.backward()
        attribution.phase = "forward"
        if optimizer is not None:
            optimizer.step()
            optimizer.zero_grad()


def _to_device(torch: Any, value: Any, convert: Callable[[Any], Any]) -> Any:
    from torch.utils._pytree import tree_map

    return tree_map(lambda x: convert(x) if isinstance(x, torch.Tensor) else x, value)


def _build(factory: Callable[[], Any], strategy: str, spec: str, fake_mode: Any = None) -> tuple[Workload, str]:
    """Call the factory for one strategy; returns the workload and the device type its tensors claim."""
    import torch

    if strategy == "cpu":
        with torch.device("cpu"):
            return as_workload(_call_factory(factory, spec), spec), "cpu"
    with torch.device("meta"):
        workload = as_workload(_call_factory(factory, spec), spec)
    if workload.model is not None and any(p.device.type != "meta" for p in workload.model.parameters()):
        workload.model = workload.model.to("meta")
    # Same sizes and strides as the real inputs (a sliced batch stays non-contiguous): layout decides
    # whether a later reshape copies. Values do not matter on meta or under fake tensors.
    def same_layout(device: str) -> Callable[[Any], Any]:
        return lambda t: torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype, device=device)

    for name in ("inputs", "targets"):
        value = getattr(workload, name)
        setattr(workload, name, _to_device(torch, value, lambda t: t if t.device.type == "meta" else same_layout("meta")(t)))
    if strategy == "meta":
        return workload, "meta"
    if workload.model is None:
        # A step function holds its own tensors: build it inside the fake mode instead.
        with fake_mode, torch.device("cpu"):
            return as_workload(_call_factory(factory, spec), spec), "cpu"
    with fake_mode:
        workload.model = workload.model.to_empty(device="cpu")
        for name in ("inputs", "targets"):
            setattr(workload, name, _to_device(torch, getattr(workload, name), same_layout("cpu")))
    return workload, "cpu"


def _reason(exc: BaseException, last_op: str) -> str:
    if isinstance(exc, _StageError):
        after = f" (last operator: {last_op})" if last_op else ""
        return f"{exc.stage} raised {_describe(exc.original)}{after}"
    message = _describe(exc).partition(": ")[2]
    where = f" at {last_op}" if last_op else ""
    return f"{type(exc).__name__}{where}" + (f": {message}" if message else "")


def _attempt(
    factory: Callable[[], Any], strategy: str, mode: str | None, spec: str
) -> tuple[Trace | None, str, Attempt]:
    import torch

    notes: list[str] = []
    started = time.perf_counter()
    fake_mode = None
    recorder = None
    with ExitStack() as stack:
        stack.enter_context(_keep_rng())
        try:
            if strategy == "fake":
                from torch._subclasses.fake_tensor import FakeTensorMode
                from torch.fx.experimental.symbolic_shapes import ShapeEnv

                fake_mode = FakeTensorMode(shape_env=ShapeEnv(), allow_non_fake_inputs=True)
            workload, device = _build(factory, strategy, spec, fake_mode)
            model = workload.model
            if mode is None:
                mode = "train" if model is None or model.training else "infer"
            attribution = _Attribution()
            if model is not None:
                attribution.name_modules(model)
            probe = Probe()
            recorder = _recorder_class()(attribution, probe, device)
            stack.enter_context(_global_hooks(attribution, notes))
            stack.enter_context(_sdpa_region(recorder, attribution))
            if fake_mode is not None:
                stack.enter_context(fake_mode)
            _run_step(torch, workload, mode, recorder, attribution, notes, spec)
        except UserError:
            raise
        except _StageError as exc:
            if strategy == "cpu" and recorder is None:
                # The factory failed on a real device: no tracer can help, it is the factory's own error.
                raise UserError(f"{spec}: the factory raised {_describe(exc.original)}; fix it so it runs on the CPU") from None
            log.debug("%s trace failed", strategy, exc_info=True)
            return None, mode or "", Attempt(strategy, False, time.perf_counter() - started, _reason(exc, recorder.last if recorder else ""))
        except Exception as exc:
            last = recorder.last if recorder is not None else ""
            log.debug("%s trace failed", strategy, exc_info=True)
            return None, mode or "", Attempt(strategy, False, time.perf_counter() - started, _reason(exc, last))
    seconds = time.perf_counter() - started
    if mode == "infer" and strategy == "meta":
        notes.append("inference traced on meta: fused fast paths (_transformer_encoder_layer_fwd, ...) check the device type and are skipped there")
    if attribution.autocast and device == "meta":
        notes.append(
            "autocast was on, but autocast does not act on meta tensors: the dtypes shown are those without it "
            "and its casts (_to_copy) are not listed; trace with --tracer fake under autocast('cpu') to see them"
        )
    if mode == "train" and strategy != "meta":
        notes.append(f"traced on {device}: host-side work (an optimizer's step counters) cannot be told from device work, so it is judged too")
    parameters = sum(p.numel() for p in model.parameters()) if model is not None else 0
    trace = Trace(
        spec=spec,
        mode=mode,
        strategy=strategy,
        device=device,
        attempts=[],
        records=recorder.records,
        seconds=seconds,
        model=type(model).__name__ if model is not None else "",
        parameters=parameters,
        notes=notes,
        probe=probe,
    )
    return trace, mode, Attempt(strategy, True, seconds)


def trace(
    factory: str | Callable[[], Any],
    mode: str | None = None,
    strategy: str | None = None,
    label: str | None = None,
    fastpath: bool = True,
) -> Trace:
    """Trace one step of the workload `factory` returns (see `Workload`).

    `mode` is train or infer (default: train when the model is in training mode); `strategy`
    forces one of meta, fake, cpu, otherwise they are tried in order (train: meta, fake, cpu;
    infer: fake, cpu) and the trace says which one worked and why the others did not.
    `fastpath=False` traces the step as torch runs it on a device type that does not take
    the fused transformer fast paths (see `takes_fastpath`).
    """
    if mode not in (None, "train", "infer"):
        raise UserError(f"mode {mode!r}: use train or infer")
    if strategy is not None and strategy not in STRATEGIES:
        raise UserError(f"tracer {strategy!r}: use one of {', '.join(STRATEGIES)}")
    spec = label or (factory if isinstance(factory, str) else getattr(factory, "__qualname__", repr(factory)))
    build = load_factory(factory) if isinstance(factory, str) else factory
    os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
    import torch  # (imported here so `accelport --help` stays fast)

    started = time.perf_counter()
    silenced: list[str] = []
    try:
        with _quiet_torch() as silenced, _fastpath(fastpath and torch.backends.mha.get_fastpath_enabled()):
            if mode is None and strategy is None:
                mode = _mode_of(build, spec)
            ladder = (strategy,) if strategy else LADDERS[mode or "train"]
            attempts: list[Attempt] = []
            for step in ladder:
                result, mode, attempt = _attempt(build, step, mode, spec)
                attempts.append(attempt)
                if result is not None:
                    result.attempts = attempts
                    result.seconds = time.perf_counter() - started
                    if not fastpath and result.mode == "infer":
                        result.notes.append("traced with the fused transformer fast paths off, as torch runs on a "
                                            "device type that does not take them (they need cpu, cuda, xpu or PrivateUse1)")
                    return result
                log.info("%s: %s tracing failed: %s", spec, step, attempt.reason)
    finally:
        for text in silenced:
            log.debug("%s: warning while tracing (not shown): %s", spec, text)
    reasons = {a.reason for a in attempts}
    if len(reasons) == 1 and len(attempts) > 1:
        tried = f"{', '.join(a.strategy for a in attempts)}: {attempts[0].reason}"
    else:
        tried = "; ".join(f"{a.strategy}: {a.reason}" for a in attempts)
    raise UserError(f"{spec}: could not trace the step ({tried}); run the factory's step on CPU to see the error")


def _mode_of(build: Callable[[], Any], spec: str) -> str:
    """train when the model is in training mode (or the factory gives a step function), else infer."""
    import torch

    try:
        with _keep_rng(), torch.device("meta"):
            workload = as_workload(_call_factory(build, spec), spec)
    except UserError:
        raise
    except Exception:
        try:
            with _keep_rng(), torch.device("cpu"):
                workload = as_workload(_call_factory(build, spec), spec)
        except _StageError as exc:
            raise UserError(f"{spec}: the factory raised {_describe(exc.original)}; fix it so it runs on the CPU") from None
    return "train" if workload.model is None or workload.model.training else "infer"
