"""What an op is and how a record describes its tensors and arguments: shared by the capture's
Python path and the compiled recorder (recorder.py hands these to _recorder.c)."""

from __future__ import annotations

import functools
import math
import zlib
from typing import Any

from accelport.verify.numerics import dumpfile

# Ops whose output holds the same elements as their first input: the output reuses the
# input's statistics instead of reading the tensor again. The first set also keeps the
# logical element order, so with full tensors the saved data is shared too.
_SAME_ORDER_OPS = frozenset(
    {
        "aten.view.default", "aten._unsafe_view.default", "aten.reshape.default", "aten.unsqueeze.default",
        "aten.squeeze.dim", "aten.squeeze.default", "aten.squeeze.dims", "aten.detach.default",
        "aten.alias.default", "aten.clone.default", "aten.contiguous.default", "aten.flatten.using_ints",
        "aten.lift_fresh.default", "aten.view_as.default", "aten._reshape_alias.default",
    }
)  # fmt: skip
_ALIAS_OPS = _SAME_ORDER_OPS | {"aten.t.default", "aten.transpose.int", "aten.permute.default"}
# Ops that only look at their input another way (no data moves, no value changes): unless
# asked to (views=True), they are not recorded; their output is listed where it is used,
# with the statistics and the producing record (src) of the tensor it views. A view can
# never be where two runs first diverge, and these are most of a training step's ops
# (about 60% of a transformer's), each paying the Python of a record. They are the
# aliasing ops that copy nothing, and expand.
_COPY_OPS = frozenset({"aten.clone.default", "aten.contiguous.default", "aten.lift_fresh.default"})
_VIEW_OPS = (_ALIAS_OPS - _COPY_OPS) | {"aten.expand.default"}
# Ops whose output is uninitialised memory: recorded without statistics.
_UNINITIALISED_PREFIXES = ("aten.empty", "aten.new_empty")
# Dispatcher calls that compute nothing (profiler ranges such as the optimizer's record_function).
_NOT_NUMERIC = ("profiler.",)
_NOT_RUN = object()  # _record_op: the op is still to run
_DTYPE_NAMES: dict[Any, str] = {}  # torch.float32 -> "float32"
# Captures recording now, innermost last: the one a random op's callable reports to.
_RECORDING: list[Any] = []


class _Entry:
    """One tensor as recorded: dtype, shape, statistics, where its data was saved, who produced it."""

    __slots__ = ("data", "desc", "dtype", "shape", "src", "stats", "uninitialised")

    def __init__(self, dtype: str, shape: list[int], stats: Any, src: int | None) -> None:
        self.uninitialised = False
        self.dtype = dtype
        self.shape = shape
        self.stats = stats  # list of numbers, index into the device batch, or None (not numeric, or uninitialised)
        self.src = src  # seq of the record whose output this is
        self.data: dict[str, Any] | None = None  # {"file", "start", "nbytes"} with full tensors
        # The tensor as a record lists it (no file to save, no checksum to add): built once,
        # shared by every record that lists the tensor; None once `data` changes.
        self.desc: dict[str, Any] | None = None



def _op_info(func: Any) -> tuple[str, bool, bool, bool, bool, bool, Any] | None:
    """(name, uninitialised output, aliasing, same element order, expand, view, callable) of an op; None: not numeric.

    The callable is the operator's C++ entry point where it has one (an OpOverload's
    __call__ is a Python frame that only forwards to it).
    """
    op = str(func)
    if op.startswith(_NOT_NUMERIC):
        return None
    call = getattr(func, "_op", None) if type(func).__name__ == "OpOverload" else None
    if _is_random(func, op):
        call = _RandomOp(call or func)
    return (op, op.startswith(_UNINITIALISED_PREFIXES), op in _ALIAS_OPS, op in _SAME_ORDER_OPS,
            op == "aten.expand.default", op in _VIEW_OPS, call or func)  # fmt: skip


# Random ops by name, where an op carries no tags (ATen marks them `nondeterministic_seeded`).
_RANDOM_NAMES = ("aten.bernoulli", "aten.native_dropout", "aten.dropout", "aten.randperm", "aten.rand",
                 "aten.normal", "aten.uniform", "aten.multinomial", "aten.exponential", "aten.geometric",
                 "aten.cauchy", "aten.log_normal", "aten.random_", "aten.poisson")  # fmt: skip


def _is_random(func: Any, op: str) -> bool:
    """Does the op draw from a random number generator (dropout, bernoulli, randperm, rand*, normal_ ...)?"""
    tags = getattr(func, "tags", None)
    if tags:
        import torch

        return torch.Tag.nondeterministic_seeded in tags
    return op.startswith(_RANDOM_NAMES)


class _RandomOp:
    """The callable of a random op: runs it under the capture recording it, which notes the
    generator's state before and the bits it drew (see Capture._run_random)."""

    __slots__ = ("call",)

    def __init__(self, call: Any) -> None:
        self.call = call

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        capture = _RECORDING[-1] if _RECORDING else None
        if capture is None:
            return self.call(*args, **kwargs)
        return capture._run_random(self.call, args, kwargs)


def _json_stats(stats: list[float]) -> list[Any]:
    """Statistics as the manifest writes them: NaN and Inf as strings (JSON has neither)."""
    # Statistics are floats; one sum tells whether any is NaN or Inf (an overflowing sum
    # only sends the list the slow way).
    if math.isfinite(sum(stats)):
        return stats
    clean = dumpfile.clean_float
    return [clean(float(v)) for v in stats]


def _dtype_name(dtype: Any) -> str:
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype).replace("torch.", "")
    return name


def _version(t: Any) -> int | None:
    """The tensor's version counter (bumped by every in-place change); None for an inference tensor, which has none."""
    try:
        return t._version
    except RuntimeError:
        return None



def _numel(shape: list[int]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _replicated(source: _Entry, outputs: list[Any]) -> _Entry | None:
    """Statistics of an expand: every element of the input repeated the same number of times."""
    if len(outputs) != 1 or not source.stats:
        return None
    times = outputs[0].numel() // max(1, _numel(source.shape))
    lo, hi, mean, l2, abs_mean, nan, inf, zero = source.stats
    stats = [lo, hi, mean, l2 * math.sqrt(times), abs_mean, nan * times, inf * times, zero * times]
    return _Entry(source.dtype, list(outputs[0].shape), stats, None)



def _tensors_in(args: tuple, kwargs: dict) -> list[Any]:
    tensor = _tensor_type()
    found: list[Any] = []
    for value in (*args, *kwargs.values()) if kwargs else args:
        if isinstance(value, tensor):
            found.append(value)
        elif isinstance(value, list | tuple):
            found.extend(v for v in value if isinstance(v, tensor))
    return found


@functools.cache
def _tensor_type() -> type:
    import torch  # not at module level: the module loads without torch

    return torch.Tensor


def _tensors_out(result: Any) -> list[Any]:
    tensor = _tensor_type()
    if isinstance(result, tensor):
        return [result]
    if isinstance(result, list | tuple):
        found: list[Any] = []
        for value in result:
            if isinstance(value, tensor):
                found.append(value)
            elif isinstance(value, list | tuple):
                found.extend(v for v in value if isinstance(v, tensor))
        return found
    return []


def _describe_args(args: tuple, kwargs: dict) -> dict[str, Any]:
    """Non-tensor arguments as JSON (tensors become {"t": index}), enough to replay the op."""
    tensor = _tensor_type()
    counter = [0]
    plain = _PLAIN_ARG_TYPES
    positional = []
    for v in args:
        kind = type(v)
        if kind in plain:
            positional.append(v)
        elif kind is tensor:  # the common case, without a call
            positional.append({"t": counter[0]})
            counter[0] += 1
        else:
            positional.append(_arg_json(v, counter, tensor))
    if not kwargs:
        return {"a": positional}
    named = {k: v if type(v) in plain else _arg_json(v, counter, tensor) for k, v in kwargs.items()}
    return {"a": positional, "kw": named}


_PLAIN_ARGS = (type(None), bool, int, str)
_PLAIN_ARG_TYPES = frozenset(_PLAIN_ARGS)


def _arg_json(value: Any, counter: list[int], tensor_type: type) -> Any:
    """A non-plain argument as JSON (callers pass plain None/bool/int/str through themselves)."""
    if isinstance(value, tensor_type):
        counter[0] += 1
        return {"t": counter[0] - 1}
    if isinstance(value, bool | int | str):  # subclasses (IntEnum...)
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"float": repr(value)}
    if isinstance(value, list | tuple):
        plain = _PLAIN_ARGS
        return [v if type(v) in plain else _arg_json(v, counter, tensor_type) for v in value]
    text = str(value)
    if text.startswith("torch."):
        return {"torch": text[len("torch.") :]}
    if type(value).__name__ == "device":
        return {"device": text}
    if type(value).__name__ == "Generator" and hasattr(value, "initial_seed"):
        # Its repr holds an address, different in every run: the seed and device identify it.
        return {"generator": {"device": str(value.device), "seed": value.initial_seed()}}
    return {"repr": repr(value)}


def _arg_json_at(value: Any, index: int) -> tuple[Any, int]:
    """_arg_json for the compiled recorder: the JSON and the next tensor index."""
    counter = [index]
    return _arg_json(value, counter, _tensor_type()), counter[0]


def _host_bytes(t: Any) -> memoryview:
    import torch

    x = t.detach()
    if x.device.type != "cpu":
        x = x.to("cpu")
    x = x.contiguous()
    if x.dtype == torch.bfloat16:
        x = x.view(torch.int16)
    elif x.dtype == torch.bool:
        x = x.view(torch.uint8)
    return memoryview(x.numpy()).cast("B")


def _rng_crc(torch: Any) -> int:
    return zlib.crc32(torch.get_rng_state().numpy().tobytes())


def _generator_crc(torch: Any, args: tuple, kwargs: dict) -> int | None:
    """CRC-32 of the state of the generator a random op draws from (its `generator=`, else its device's default)."""
    generator = kwargs.get("generator")
    try:
        if generator is not None:
            state = generator.get_state()
        else:
            device = kwargs.get("device")
            if device is None:
                tensors = _tensors_in(args, {})
                device = tensors[0].device if tensors else "cpu"
            device = torch.device(device)
            if device.type == "cpu":
                state = torch.default_generator.get_state()
            else:
                module = torch.get_device_module(device.type)
                state = module.get_rng_state(device.index if device.index is not None else module.current_device())
        return zlib.crc32(state.cpu().numpy().tobytes())
    except (RuntimeError, AttributeError, TypeError, ValueError):
        return None  # a backend without a readable generator state: the outputs' bits still tell
