"""Run an unmodified CUDA program on another device: torch.cuda redirected at run time, every redirect told.

Used by `accelport run` (a sitecustomize in the child's PYTHONPATH installs it when torch
is imported) and by `import accelport.auto`. Where runtime patchers rewrite whatever they
can reach, this shim

- redirects only calls the program (or a library it uses) makes; torch's own internal
  calls keep their real torch.cuda behaviour;
- logs each redirected API once, with the call site where the program first used it;
- never disables torch.jit.script, never changes a dtype (torch.cuda.DoubleTensor stays
  float64, autocast keeps the dtype asked for), never rewrites a path or any other string;
- skips pinning where there is no accelerator to pin for (`.pin_memory()` copies into
  pageable memory, `pin_memory=True` becomes False): the values are the same, and torch
  would raise instead;
- records every redirected API with its call sites and call counts, and writes that
  dynamic inventory as JSON when the process exits.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import importlib.abc
import importlib.util
import json
import logging
import os
import sys
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

ENV_DEVICE = "ACCELPORT_RUN_DEVICE"  # device type to run on; "" = the current accelerator, else the CPU
ENV_RECORD_DIR = "ACCELPORT_RUN_DIR"  # each process writes <pid>.json here at exit
ENV_QUIET = "ACCELPORT_RUN_QUIET"  # "1": record, but do not log each redirect
RECORD_SCHEMA = "accelport-run-process-1"

log = logging.getLogger("accelport.run")

# Rule IDs for redirected APIs that are not torch.cuda.* names (those come from the catalogue).
_RULES = {
    "Tensor.cuda": "AP1004",
    "Module.cuda": "AP1004",
    "Tensor.is_cuda": "AP1005",
    "\"cuda\" device argument": "AP1001",
    "torch.load(map_location)": "AP1001",
    "torch.amp.autocast": "AP1201",
    "torch.amp.GradScaler": "AP1202",
    "torch.distributed.init_process_group": "AP1301",
    "DistributedDataParallel(device_ids)": "AP1302",
    "Tensor.pin_memory": "AP1605",
    "pin_memory=True": "AP1605",
}
_UNPINNED = "pin_memory=False (no accelerator to pin for)"
_FACTORIES = (
    "zeros", "ones", "empty", "full", "rand", "randn", "randint", "arange", "tensor", "as_tensor",
    "zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like", "randint_like",
    "eye", "linspace", "logspace", "randperm", "empty_strided", "normal",
)


@dataclass
class Redirect:
    """One redirected API: what it became, and where the program called it."""

    api: str
    to: str
    calls: int = 0
    sites: Counter = field(default_factory=Counter)


class Shim:
    """The installed redirects for one process."""

    def __init__(self, torch: Any, target: Any, quiet: bool = False) -> None:
        self.torch = torch
        self.target = target  # torch.device
        self.accelerator = target.type != "cpu"
        self.identity = target.type == "cuda"  # CUDA is there: record what is used, change nothing
        self.quiet = quiet
        self.redirects: dict[str, Redirect] = {}
        self._lock = threading.Lock()
        # Frames from these files are torch itself, this shim, or wrappers torch puts around
        # its functions (deprecation decorators): they never count as the program's call site.
        wrappers = [m for m in ("typing_extensions", "functools", "contextlib", "warnings") if m in sys.modules]
        self._internal = (
            *(os.path.dirname(os.path.abspath(m.__file__)) + os.sep for m in (torch, sys.modules["accelport"])),
            *(os.path.abspath(sys.modules[m].__file__) for m in wrappers),
            "<frozen ",
        )

    # ----------------------------------------------------------------- bookkeeping

    def _is_internal(self, filename: str) -> bool:
        return filename.startswith(self._internal)

    def _caller_is_program(self, depth: int = 2) -> bool:
        """Is the immediate caller the program (or a library), not torch or accelport itself?"""
        return not self._is_internal(sys._getframe(depth).f_code.co_filename)

    def _program_frame(self, depth: int = 2):
        frame = sys._getframe(depth)
        while frame is not None and self._is_internal(frame.f_code.co_filename):
            frame = frame.f_back
        return frame

    def note(self, api: str, to: str, depth: int = 3) -> None:
        """Count one redirected call; the first one of each API is logged with its call site."""
        frame = self._program_frame(depth)
        site = (frame.f_code.co_filename, frame.f_lineno) if frame is not None else ("<unknown>", 0)
        with self._lock:
            redirect = self.redirects.get(api)
            first = redirect is None
            if first:
                redirect = self.redirects[api] = Redirect(api, to)
            redirect.calls += 1
            redirect.sites[site] += 1
        if first and not self.quiet:
            where = f"{os.path.relpath(site[0]) if not site[0].startswith('<') else site[0]}:{site[1]}"
            log.warning("accelport run: %s -> %s  [%s]", api, to, where)

    # ----------------------------------------------------------------- devices

    def device(self, index: int | None = None) -> Any:
        """The target device for a CUDA device with this index."""
        if not self.accelerator:
            return self.torch.device("cpu")
        return self.torch.device(self.target.type, index if index is not None else self.target.index)

    def translate(self, value: Any, index_is_device: bool = False) -> tuple[Any, bool]:
        """A CUDA device (string or torch.device, or an index where one means a device) as the
        target device; anything else unchanged."""
        torch = self.torch
        if index_is_device and isinstance(value, int) and not isinstance(value, bool):
            return self.device(value), True  # model.to(rank): a CUDA device index
        if isinstance(value, str):
            kind, _, index = value.partition(":")
            if kind == "cuda" and (not index or index.isdigit()):
                return self.device(int(index) if index else None), True
        elif isinstance(value, torch.device) and value.type == "cuda":
            return self.device(value.index), True
        return value, False

    # ----------------------------------------------------------------- wrapping

    def replace(self, owner: Any, name: str, api: str, to: str, replacement: Any) -> None:
        """owner.name: the program's calls go to `replacement` (and are counted); torch's own keep the original."""
        original = getattr(owner, name)
        shim = self
        target = original if self.identity else replacement

        @functools.wraps(original)
        def redirected(*args: Any, **kwargs: Any) -> Any:
            if not shim._caller_is_program():
                return original(*args, **kwargs)
            shim.note(api, to)
            return target(*args, **kwargs)

        setattr(owner, name, redirected)

    def translate_arguments(
        self,
        owner: Any,
        name: str,
        api: str,
        positions: tuple[int, ...],
        keywords: tuple[str, ...],
        index_is_device: bool = False,
        pins: bool = False,
    ) -> None:
        """owner.name: CUDA devices among these arguments become the target device; where it
        `pins` (takes pin_memory=) and there is no accelerator, pin_memory=True becomes False."""
        if self.identity:
            return
        original = getattr(owner, name)
        shim = self
        unpin = pins and not self.accelerator

        @functools.wraps(original)
        def translated(*args: Any, **kwargs: Any) -> Any:
            if not shim._caller_is_program():
                return original(*args, **kwargs)
            changed = False
            if positions:
                args = list(args)
                for position in positions:
                    if position < len(args):
                        args[position], hit = shim.translate(args[position], index_is_device)
                        changed |= hit
            for keyword in keywords:
                if keyword in kwargs:
                    kwargs[keyword], hit = shim.translate(kwargs[keyword])
                    changed |= hit
            if changed:
                shim.note(api, f"device {shim.device()}")
            if unpin and kwargs.get("pin_memory") is True:
                kwargs["pin_memory"] = False
                shim.note("pin_memory=True", _UNPINNED)
            return original(*args, **kwargs)

        setattr(owner, name, translated)

    # ----------------------------------------------------------------- the redirects

    def install(self) -> None:
        torch = self.torch
        cuda = torch.cuda
        accel = torch.accelerator
        on = self.accelerator
        kind = self.target.type
        module = torch.get_device_module(kind) if on else None
        from accelport.runtime import compat

        def when_accelerator(function: Any, default: Any) -> Any:
            return function if on else (lambda *args, **kwargs: default)

        functions = {
            "is_available": (lambda: on, f"{on} ({kind})"),
            "device_count": (when_accelerator(lambda: accel.device_count(), 0), f"torch.accelerator.device_count() ({kind})" if on else "0 (cpu)"),
            "current_device": (when_accelerator(lambda: accel.current_device_index(), 0), "torch.accelerator.current_device_index()" if on else "0 (cpu)"),
            "set_device": (when_accelerator(lambda d: accel.set_device_index(d if isinstance(d, int) else torch.device(d).index or 0), None), "torch.accelerator.set_device_index" if on else "no-op (cpu)"),
            "synchronize": (when_accelerator(lambda device=None: accel.synchronize(), None), "torch.accelerator.synchronize" if on else "no-op (cpu)"),
            "empty_cache": (when_accelerator(lambda: accel.empty_cache(), None), "torch.accelerator.empty_cache" if on else "no-op (cpu)"),
            "manual_seed": (when_accelerator(lambda seed: getattr(module, "manual_seed", lambda s: None)(seed), None), f"torch.{kind}.manual_seed" if on else "no-op (the CPU generator is left alone)"),
            "manual_seed_all": (when_accelerator(lambda seed: getattr(module, "manual_seed_all", lambda s: None)(seed), None), f"torch.{kind}.manual_seed_all" if on else "no-op (the CPU generator is left alone)"),
            "Event": (lambda *args, **kwargs: compat.Event(self.target, **kwargs), f"accelport.compat.Event({kind})"),
            "Stream": (lambda device=None, priority=0, **kwargs: torch.Stream(self.device(), priority=priority), f"torch.Stream({kind})"),
            "stream": (lambda stream: stream if isinstance(stream, torch.Stream) else contextlib.nullcontext(), "the torch.Stream itself (no-op for None)"),
            "get_device_name": (lambda device=None: getattr(module, "get_device_name", lambda d=None: kind)(device) if on else kind, f"torch.{kind}.get_device_name" if on else "'cpu'"),
            "is_bf16_supported": (lambda *args, **kwargs: compat.is_bf16_supported(self.target), "accelport.compat.is_bf16_supported"),
        }
        for name in ("memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved"):
            functions[name] = (when_accelerator(getattr(accel, name), 0), f"torch.accelerator.{name}" if on else "0 (cpu)")
        functions["reset_peak_memory_stats"] = (when_accelerator(accel.reset_peak_memory_stats, None), "torch.accelerator.reset_peak_memory_stats" if on else "no-op (cpu)")
        functions["memory_stats"] = (when_accelerator(accel.memory_stats, {}), "torch.accelerator.memory_stats" if on else "{} (cpu)")
        functions["mem_get_info"] = (when_accelerator(accel.get_memory_info, (0, 0)), "torch.accelerator.get_memory_info" if on else "(0, 0) (cpu)")
        for name, (replacement, to) in functions.items():
            if hasattr(cuda, name):
                self.replace(cuda, name, f"torch.cuda.{name}", to, replacement)

        nvtx = cuda.nvtx
        self.replace(nvtx, "range", "torch.cuda.nvtx.range", "torch.profiler.record_function",
                     lambda msg, *args, **kwargs: torch.profiler.record_function(msg.format(*args, **kwargs)))
        for name in ("range_push", "range_pop", "mark"):
            self.replace(nvtx, name, f"torch.cuda.nvtx.{name}", "no-op", lambda *args, **kwargs: 0)

        self._install_tensor_methods()
        self._install_device_arguments()
        self._install_pinning()
        self._install_amp()
        self._install_distributed()

    def _install_tensor_methods(self) -> None:
        torch = self.torch
        if self.identity:
            return
        shim = self
        original_tensor_cuda = torch.Tensor.cuda
        original_module_cuda = torch.nn.Module.cuda
        kind = self.target.type

        def tensor_cuda(tensor, device=None, non_blocking=False, memory_format=torch.preserve_format):
            if not shim._caller_is_program():
                return original_tensor_cuda(tensor, device, non_blocking, memory_format=memory_format)
            shim.note("Tensor.cuda", f"Tensor.to({kind})")
            target = shim.device(device if isinstance(device, int) else None) if not isinstance(device, str | torch.device) else shim.translate(device)[0]
            return tensor.to(target, non_blocking=non_blocking, memory_format=memory_format)

        def module_cuda(module, device=None):
            if not shim._caller_is_program():
                return original_module_cuda(module, device)
            shim.note("Module.cuda", f"Module.to({kind})")
            target = shim.device(device if isinstance(device, int) else None) if not isinstance(device, str | torch.device) else shim.translate(device)[0]
            return module.to(target)

        torch.Tensor.cuda = functools.wraps(original_tensor_cuda)(tensor_cuda)
        torch.nn.Module.cuda = functools.wraps(original_module_cuda)(module_cuda)
        is_cuda = torch._C.TensorBase.is_cuda

        def tensor_is_cuda(tensor):
            if not shim._caller_is_program():
                return is_cuda.__get__(tensor)
            shim.note("Tensor.is_cuda", f"tensor.device.type == {kind!r}")
            return tensor.device.type == kind

        torch.Tensor.is_cuda = property(tensor_is_cuda, doc="is_cuda, redirected by accelport run")

    def _install_device_arguments(self) -> None:
        torch = self.torch
        # Methods: position 0 is the tensor or module itself.
        self.translate_arguments(torch.Tensor, "to", "\"cuda\" device argument", (1,), ("device",), index_is_device=True)
        self.translate_arguments(torch.nn.Module, "to", "\"cuda\" device argument", (1,), ("device",), index_is_device=True)
        self.translate_arguments(torch, "load", "torch.load(map_location)", (1,), ("map_location",))
        for name in _FACTORIES:
            if hasattr(torch, name):
                self.translate_arguments(torch, name, "\"cuda\" device argument", (), ("device",), pins=True)
        for name in ("new_empty", "new_zeros", "new_ones", "new_full", "new_tensor"):
            self.translate_arguments(torch.Tensor, name, "\"cuda\" device argument", (), ("device",), pins=True)

    def _install_pinning(self) -> None:
        """Pinned host memory needs an accelerator; without one, torch raises where the program pins.

        Then `.pin_memory()` gives a plain copy (what pinning returns, in pageable memory) and
        DataLoader(pin_memory=True) loads unpinned, as torch itself would with a warning. On an
        accelerator pinning works as it is (a "cuda" device argument is the target's).
        """
        torch = self.torch
        if self.identity:
            return
        if self.accelerator:
            self.translate_arguments(torch.Tensor, "pin_memory", "\"cuda\" device argument", (1,), ("device",))
            return
        shim = self
        original_pin = torch.Tensor.pin_memory

        @functools.wraps(original_pin)
        def pin_memory(tensor, *args, **kwargs):
            if not shim._caller_is_program():
                return original_pin(tensor, *args, **kwargs)
            shim.note("Tensor.pin_memory", "a pageable copy (no accelerator to pin for)")
            return tensor.clone()

        torch.Tensor.pin_memory = pin_memory
        loader = torch.utils.data.DataLoader
        loader_init = loader.__init__
        pin_position = 7  # DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, collate_fn, pin_memory)

        @functools.wraps(loader_init)
        def loader_init_unpinned(self, *args, **kwargs):
            if shim._caller_is_program():
                if kwargs.get("pin_memory") is True:
                    kwargs["pin_memory"] = False
                    shim.note("pin_memory=True", _UNPINNED)
                elif len(args) > pin_position and args[pin_position] is True:
                    args = (*args[:pin_position], False, *args[pin_position + 1 :])
                    shim.note("pin_memory=True", _UNPINNED)
            loader_init(self, *args, **kwargs)

        loader.__init__ = loader_init_unpinned

    def _install_amp(self) -> None:
        """autocast("cuda") and GradScaler("cuda") started by the program use the target's device type.

        torch.cuda.amp's classes call their torch.amp base with "cuda" from inside torch, so
        here the question is whether the program started the call, not who called last.
        """
        if self.identity:
            return
        shim = self
        kind = self.target.type
        autocast = self.torch.amp.autocast_mode.autocast
        scaler = self.torch.amp.grad_scaler.GradScaler
        autocast_init, scaler_init = autocast.__init__, scaler.__init__

        def started_by_program() -> bool:
            return shim._program_frame(3) is not None

        @functools.wraps(autocast_init)
        def autocast_init_redirected(self, device_type, *args, **kwargs):
            if device_type == "cuda" and started_by_program():
                shim.note("torch.amp.autocast", f"autocast({kind!r}), same dtype")
                device_type = kind
            autocast_init(self, device_type, *args, **kwargs)

        @functools.wraps(scaler_init)
        def scaler_init_redirected(self, device="cuda", *args, **kwargs):
            if device == "cuda" and started_by_program():
                shim.note("torch.amp.GradScaler", f"GradScaler({kind!r})")
                device = kind
            scaler_init(self, device, *args, **kwargs)

        autocast.__init__ = autocast_init_redirected
        scaler.__init__ = scaler_init_redirected

    def _install_distributed(self) -> None:
        torch = self.torch
        if self.identity or not torch.distributed.is_available():
            return
        dist = torch.distributed
        shim = self
        init = dist.init_process_group

        @functools.wraps(init)
        def init_process_group(*args, **kwargs):
            backend = kwargs.get("backend", args[0] if args else None)
            if isinstance(backend, str) and "nccl" in backend and shim._caller_is_program():
                chosen = dist.get_default_backend_for_device(shim.target)
                shim.note("torch.distributed.init_process_group", f"backend={chosen!r}")
                if "backend" in kwargs:
                    kwargs["backend"] = chosen
                else:
                    args = (chosen, *args[1:])
            return init(*args, **kwargs)

        dist.init_process_group = init_process_group
        ddp = torch.nn.parallel.DistributedDataParallel
        ddp_init = ddp.__init__

        @functools.wraps(ddp_init)
        def ddp_init_redirected(self, module, device_ids=None, output_device=None, *args, **kwargs):
            if not shim.accelerator and (device_ids is not None or output_device is not None) and shim._caller_is_program():
                shim.note("DistributedDataParallel(device_ids)", "device_ids=None (a CPU module)")
                device_ids = output_device = None
            ddp_init(self, module, device_ids, output_device, *args, **kwargs)

        ddp.__init__ = ddp_init_redirected

    # ----------------------------------------------------------------- the record

    def record(self) -> dict[str, Any]:
        return {
            "schema": RECORD_SCHEMA,
            "pid": os.getpid(),
            "argv": list(sys.argv),
            "device": str(self.target),
            "apis": [
                {
                    "api": r.api,
                    "to": r.to,
                    "calls": r.calls,
                    "sites": [{"path": path, "line": line, "calls": n} for (path, line), n in sorted(r.sites.items())],
                }
                for r in sorted(self.redirects.values(), key=lambda r: r.api)
            ],
        }

    def write_record(self, folder: str) -> None:
        from accelport.fileio import atomic_open

        with atomic_open(os.path.join(folder, f"{os.getpid()}.json")) as handle:
            json.dump(self.record(), handle)


_SHIM: Shim | None = None


def rule_for(api: str) -> str | None:
    """The rule ID behind a redirected API (for the dynamic inventory)."""
    if api in _RULES:
        return _RULES[api]
    from accelport.source.names import lookup_api

    found = lookup_api(api)
    return found[1]["rule"] if found else None


def _choose_target(torch: Any, requested: str | None) -> Any:
    current = torch.accelerator.current_accelerator()
    if not requested:
        return current or torch.device("cpu")
    kind = requested.split(":")[0]
    if kind != "cpu" and (current is None or current.type != kind):
        have = current.type if current is not None else "none"
        sys.stderr.write(f"accelport run: device {requested}: no such accelerator here (current accelerator: {have}); "
                         "run on a machine that has it, or choose the cpu device\n")
        raise SystemExit(2)
    return torch.device(requested)


def activate(device: str | None = None, record_dir: str | None = None, quiet: bool | None = None) -> Shim:
    """Install the redirects now (torch is imported here). Idempotent."""
    global _SHIM
    if _SHIM is not None:
        return _SHIM
    import torch

    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        log.addHandler(handler)
        log.propagate = False
    quiet = os.environ.get(ENV_QUIET) == "1" if quiet is None else quiet
    shim = Shim(torch, _choose_target(torch, device), quiet=quiet)
    shim.install()
    _SHIM = shim
    if record_dir:
        atexit.register(shim.write_record, record_dir)
    return shim


class _AfterTorchImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Installs the shim as soon as the program imports torch, so nothing else pays for it."""

    def __init__(self, device: str | None, record_dir: str | None) -> None:
        self.device = device
        self.record_dir = record_dir
        self._loader: Any = None

    def find_spec(self, name: str, path: Any, target: Any = None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None:
            return spec
        self._loader = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        module.__spec__.loader = module.__loader__ = self._loader
        self._loader.exec_module(module)
        activate(self.device, self.record_dir)


def install_on_import(device: str | None = None, record_dir: str | None = None) -> None:
    """Redirect torch.cuda once torch is imported (at once if it already is)."""
    if "torch" in sys.modules:
        activate(device, record_dir)
        return
    sys.meta_path.insert(0, _AfterTorchImport(device, record_dir))


def install_from_environment() -> None:
    """What the `accelport run` sitecustomize calls: settings come from ACCELPORT_RUN_* variables."""
    if ENV_DEVICE not in os.environ:
        return
    install_on_import(os.environ.get(ENV_DEVICE) or None, os.environ.get(ENV_RECORD_DIR) or None)
