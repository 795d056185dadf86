"""The semantic oracle: generated CUDA programs behave the same before and after migration (issue 20).

Hypothesis writes modules of small programs (each a function) over the CUDA idioms migrate
rewrites: conditional device selection in every syntactic position, comprehensions, lambdas,
defaults, f-strings, walrus, match, decorators, pinning, memory statistics, streams and events,
amp, DDP. Each module is migrated, then the original and the migrated module are executed here,
where torch has no CUDA (so the original takes its own `is_available()` branches), and every
program's observable behaviour is compared: what it prints, what it returns, the devices and
tensors in those, the type of any exception. Where the original fails only because CUDA is
missing, the migrated program must run, printing what the original printed before it failed.
Zero differences and zero refusals (a file migrate leaves alone, a marker where a rewrite exists).

An unconditional CUDA device is observed through its use (a tensor put on it), never by printing
the device alone: naming the device in use instead of "cuda" is the change migration makes.

The programs run in this process (exec), batched: one module holds PROGRAMS_PER_MODULE programs,
so one migration and one exec serve many programs.
"""

from __future__ import annotations

import collections
import re
import sys
import textwrap
import warnings
from dataclasses import dataclass

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accelport import knowledge
from accelport.migrate import codemods, migrate_source
from accelport.migrate.helpers import module_text

PROGRAMS_PER_MODULE = 10
MODULES = 210  # 2,100 programs in the default run
AVAILABLE = "torch.cuda.is_available()"
# What the CPU build of torch raises where CUDA is needed (messages verified on torch 2.13.0+cpu).
_CUDA_MISSING = re.compile(
    r"Torch not compiled with CUDA|dummy base class|requires CUDA|no attribute '_cuda|NCCL|"
    r"Cannot access accelerator device when none is available|CUDA|cuda"
)
_MARKER = re.compile(r"# accelport: (AP\d{4}):")
# The only markers the generated idioms may get: cudnn.deterministic, kept (exact) with no portable equivalent.
KEPT = frozenset({"AP1402"})
PRELUDE = textwrap.dedent(
    """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank = 0


    def tag(value):
        def wrap(fn):
            fn.tag = value
            return fn

        return wrap

    """
)


# --------------------------------------------------------------------------- programs


def _device_forms(q: str) -> list[str]:
    """Conditional device expressions; `q` is the quote they use (the other one inside an f-string)."""
    a = AVAILABLE
    return [
        f"{q}cuda{q} if {a} else {q}cpu{q}",
        f"{q}cpu{q} if not {a} else {q}cuda{q}",
        f"torch.device({q}cuda{q}) if {a} else torch.device({q}cpu{q})",
        f"torch.device({q}cpu{q}) if not {a} else torch.device({q}cuda{q})",
        f"torch.device({q}cuda{q} if {a} else {q}cpu{q})",
        f"{q}cuda:0{q} if {a} else {q}cpu{q}",
        f"torch.device({q}cuda:0{q}) if {a} else torch.device({q}cpu{q})",
        f"f{q}cuda:{{rank}}{q} if {a} else {q}cpu{q}",
        f"torch.device({q}cuda{q}, rank) if {a} else torch.device({q}cpu{q})",
        f"({q}cuda{q} if {a} else {q}cpu{q})",
    ]


def _positions(e: str, f: str, name: str) -> list[list[str]]:
    """The device expression `e` (`f`: the same with the other quote, for f-strings) in every position."""
    return [
        [f"{name} = {e}", f"print({name})"],
        [f"def pick(x={e}):", "    return x", "print(pick())"],
        [f"def pick(*, x={e}):", "    return x", "print(pick())"],
        [f"choose = lambda: {e}", "print(choose())"],
        [f"choose = lambda d={e}: d", "print(choose())"],
        [f"pair = ({e}, 1)", "print(pair)"],
        [f"print({e})"],
        [f"print(f\"{{{f}}}\")"],
        [f"print(({name} := {e}))", f"print({name})"],
        ["def pick():", f"    return {e}", "print(pick())"],
        [f"print([{e} for _ in range(2)])"],
        [f"print([i for i in range(2) if ({e})])"],
        [f"print({{i: {e} for i in range(1)}})"],
        [f"print({{{e!s}: 1}} if False else {{'k': {e}}})"],
        [f"match {e}:", "    case 'cpu':", "        print('cpu')", "    case _:", "        print('other')"],
        [f"@tag({e})", "def inner():", "    pass", "print(inner.tag)"],
        ["class Config:", f"    device = {e}", "print(Config.device)"],
        [f"for d in [{e}]:", "    print(d)"],
        [f"{name}s = [{e}] * 2", f"print({name}s)"],
        [f"print(not ({e}))"],
        [f"print([{e}][0] if True else None)"],
        [f"print(*[{e}])"],
        [f"print({e}, sep='|')"],
        ["def gen():", f"    yield {e}", "print(list(gen()))"],
        ["try:", f"    value = {e}", "finally:", "    print('done')", "print(value)"],
    ]


def _device_positions(e: str) -> list[list[str]]:
    """Positions only a device can take."""
    return [
        [f"print(torch.zeros(1, device={e}).device)"],
        [f"print(torch.ones(2).to({e}))"],
        [f"with torch.device({e}):", "    print(torch.ones(1).device)"],
    ]


# Expressions over the CUDA API (not devices) that go in the same positions (tensors of one element:
# some positions take their truth value).
_EXPRESSIONS = [
    "torch.cuda.memory_allocated()",
    "torch.cuda.max_memory_allocated() / 2**20",
    "torch.cuda.memory_reserved() // 2",
    "torch.cuda.current_device()",
    "torch.cuda.device_count()",
    "torch.cuda.is_available()",
    "torch.ones(1).pin_memory()",
    "torch.arange(2).pin_memory().sum()",
    "torch.ones(1).cuda()",
    "torch.ones(2).is_cuda",
    "torch.ones(2).device.type == 'cuda'",
    "torch.cuda.is_bf16_supported()",
    "torch.cuda.memory_stats()",
    "torch.cuda.memory_stats_as_nested_dict()",
    "torch.cuda.get_device_name(0)",
    "'nccl' if torch.cuda.is_available() else 'gloo'",
    "torch.cuda.amp.GradScaler().scale(torch.tensor(3.0))",
    "torch.ones(3).to(rank).sum()",
]


# Other idioms: each a list of lines. Those the original cannot run without CUDA say so by failing.
_IDIOMS = [
    [f"print({AVAILABLE}, torch.cuda.device_count())"],
    ["print(torch.cuda.memory_allocated(), torch.cuda.max_memory_allocated())"],
    ["print(torch.cuda.memory_reserved() / 2**20, torch.cuda.max_memory_reserved())"],
    ['print(f"{torch.cuda.max_memory_allocated() / 1e9:.2f} GB")'],
    ["print([i for i in range(3) if torch.cuda.memory_allocated()])"],
    ["peak = lambda: torch.cuda.max_memory_allocated() // 2", "print(peak())"],
    ["print(torch.cuda.memory_stats())"],
    ["torch.cuda.empty_cache()", "print('emptied')"],
    ["torch.cuda.synchronize()", "print('synchronized')"],
    ["torch.cuda.synchronize()", "torch.cuda.empty_cache()", "print('tidy')"],
    ["torch.cuda.reset_peak_memory_stats()", "print('reset')"],
    ["print(torch.cuda.current_device())"],
    ["print([1 for _ in range(2) if torch.cuda.current_device()])"],
    ["print(torch.cuda.is_bf16_supported())"],
    ["torch.cuda.manual_seed_all(3)", "print(torch.rand(2))"],
    ["torch.manual_seed(1)", "torch.cuda.manual_seed(1)", "print(torch.rand(1))"],
    ["x = torch.ones(2).pin_memory()", "print(x)"],
    ["xs = [t.pin_memory() for t in [torch.ones(1), torch.zeros(1)]]", "print(xs)"],
    ["print(torch.arange(3).pin_memory().sum())"],
    ["loader = torch.utils.data.DataLoader(list(range(4)), batch_size=2, pin_memory=True)", "print([b for b in loader])"],
    ["print(torch.empty(2, pin_memory=True).shape)"],
    ["x = torch.ones(3).cuda()", "print(x.sum(), x.is_cuda)"],
    ["print(torch.ones(2).is_cuda)"],
    ["print(torch.ones(2).device.type == 'cuda', torch.ones(2).device.type != 'cuda')"],
    ["print(torch.ones(2).to('cuda').device.type)"],
    ["print(torch.zeros(2, device='cuda').device)"],
    ["model = torch.nn.Linear(2, 1).cuda()", "print(model(torch.ones(1, 2).cuda()).shape)"],
    ["side = torch.cuda.Stream()", "with torch.cuda.stream(side):", "    y = torch.ones(2) * 3",
     "torch.cuda.current_stream().wait_stream(side)", "print(y)"],
    ["start = torch.cuda.Event(enable_timing=True)", "end = torch.cuda.Event(enable_timing=True)", "start.record()",
     "y = torch.ones(4).sum()", "end.record()", "end.synchronize()", "print(y, start.elapsed_time(end) >= 0)"],
    ["with torch.cuda.amp.autocast():", "    y = torch.ones(2, 2) @ torch.ones(2, 2)", "print(y)"],
    ["with torch.autocast('cuda', dtype=torch.float16):", "    y = torch.ones(2, 2) @ torch.ones(2, 2)", "print(y.dtype)"],
    ["with torch.amp.autocast(device_type='cuda'):", "    y = torch.ones(2, 2) @ torch.ones(2, 2)", "print(y.dtype)"],
    ["scaler = torch.cuda.amp.GradScaler()", "print(scaler.scale(torch.tensor(2.0)), scaler.is_enabled())"],
    ["scaler = torch.amp.GradScaler()", "print(scaler.scale(torch.tensor(2.0)))"],
    ["torch.backends.cudnn.deterministic = True", "print(torch.backends.cudnn.deterministic)",
     "torch.backends.cudnn.deterministic = False"],
    ["torch.backends.cuda.matmul.allow_tf32 = False", "print(torch.get_float32_matmul_precision())"],
    ["try:", "    raise torch.cuda.OutOfMemoryError('full')", "except torch.cuda.OutOfMemoryError as e:", "    print('oom', e)"],
    ["with torch.cuda.device(0):", "    print(torch.ones(1))"],
    ["model = torch.nn.Linear(2, 1).cuda()", "ddp = DDP(model, device_ids=[rank], output_device=rank)",
     "print(ddp(torch.ones(1, 2).cuda()).shape)"],
    ["group = dist.new_group(backend='nccl')", "print(dist.get_world_size(group))"],
    ["state = torch.cuda.get_rng_state()", "print(state.dtype)"],
    ["backend = 'nccl' if torch.cuda.is_available() else 'gloo'", "print(backend)"],
    ["backend = 'gloo' if not torch.cuda.is_available() else 'nccl'", "print(backend)"],
    ["x = torch.ones(2).cuda(rank, non_blocking=True)", "print(x)"],
    ["print(torch.ones(1, device=torch.device(f'cuda:{rank}')).device.type)"],
    ["torch.cuda.set_device(rank)", "print('set')"],
    ["with torch.cuda.amp.autocast(enabled=False):", "    y = torch.ones(2, 2) @ torch.ones(2, 2)", "print(y.dtype)"],
    ['print(f"{torch.cuda.memory_allocated() / 2**20:.1f} MiB")'],
    ["x = torch.ones(2).cuda()", "assert x.is_cuda, 'on the GPU'", "print(x)"],
    ["def load(map_location='cuda'):", "    return torch.ones(1).to(map_location)", "print(load())"],
    ["with torch.cuda.nvtx.range('step'):", "    print(1)"],
    ["print(list(torch.cuda.memory_allocated() for _ in range(2)))"],
    ["def report(m=torch.cuda.max_memory_allocated()):", "    return m", "print(report())"],
    ["print(torch.ones(1).cuda().is_cuda if torch.cuda.is_available() else 'no gpu')"],
    ["model = torch.nn.Linear(2, 1).to(rank)", "print(model(torch.ones(1, 2).to(rank)).shape)"],
    ["if torch.cuda.is_available():", "    d = 'cuda'", "else:", "    d = 'cpu'", "print(d)"],
    ["if not torch.cuda.is_available():", "    d = torch.device('cpu')", "else:", "    d = torch.device('cuda:0')",
     "print(torch.ones(1, device=d).device.type)"],
    ["d = 'cpu'", "if torch.cuda.is_available():", "    d = 'cuda:0'", "print(d)"],
    ["if torch.cuda.is_available():", "    backend = 'nccl'", "else:", "    backend = 'gloo'", "print(backend)"],
    ["with torch.device('cuda' if torch.cuda.is_available() else 'cpu'):", "    print(torch.ones(1).device)"],
    ["device = torch.device('cpu')", "print(torch.ones(1).cuda(device))"],
    ["where = f'cuda:{rank}'", "print(torch.ones(1).to(where).device.type)"],
    ["print(torch.cuda.get_device_name(0))"],
]


@st.composite
def program(draw) -> list[str]:
    """One program: a few statements over the idioms (a device expression in some position, or another idiom)."""
    lines: list[str] = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["device", "expression", "idiom"]))
        name = draw(st.sampled_from(["d", "device", "dev", "target", "map_location", "value"]))
        if kind == "device":
            index = draw(st.integers(0, len(_device_forms('"')) - 1))
            expression, inner = _device_forms('"')[index], _device_forms("'")[index]
            lines += draw(st.sampled_from(_positions(expression, inner, name) + _device_positions(expression)))
        elif kind == "expression":
            expression = draw(st.sampled_from(_EXPRESSIONS))
            lines += draw(st.sampled_from(_positions(expression, expression, name)))
        else:
            lines += draw(st.sampled_from(_IDIOMS))
    return lines


@st.composite
def module(draw) -> tuple[str, list[str]]:
    """A module of PROGRAMS_PER_MODULE programs (a function, a method or a closure each), maybe with a module-level device choice."""
    parts = [PRELUDE]
    if draw(st.booleans()):
        parts.append(f"CHOSEN = {draw(st.sampled_from(_device_forms(chr(34))[:7]))}\n\n")
    names = []
    for index in range(PROGRAMS_PER_MODULE):
        body = draw(program())
        names.append(f"program_{index}")
        style = draw(st.sampled_from(["function", "method", "closure"]))
        if style == "function":
            parts.append(f"\ndef program_{index}():\n" + "".join(f"    {line}\n" for line in body) + "\n")
        elif style == "method":
            parts.append(
                f"\nclass Program{index}:\n    def run(self):\n" + "".join(f"        {line}\n" for line in body)
                + f"\n\ndef program_{index}():\n    return Program{index}().run()\n"
            )
        else:
            parts.append(
                f"\ndef program_{index}():\n    def inner():\n" + "".join(f"        {line}\n" for line in body)
                + "\n    return inner()\n"
            )
    return "".join(parts), names


# --------------------------------------------------------------------------- running


@dataclass(frozen=True)
class Outcome:
    printed: tuple
    returned: object
    error: tuple[str, bool] | None  # (exception type, whether it says CUDA is missing)


def normal(value: object) -> object:
    """What can be observed of a value: tensors by dtype, device type and values; devices by type and index."""
    if isinstance(value, torch.Tensor):
        return ("tensor", str(value.dtype), value.device.type, value.detach().cpu().tolist())
    if isinstance(value, torch.device):
        return ("device", value.type, value.index)
    if isinstance(value, dict):
        return (type(value).__name__, tuple(sorted((repr(k), normal(v)) for k, v in value.items())))
    if isinstance(value, list | tuple):
        return (type(value).__name__, tuple(normal(v) for v in value))
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return ("object", type(value).__name__)


def execute(text: str, names: list[str]) -> dict[str, Outcome]:
    """Run the module's text here and each of its programs; what each printed, returned or raised."""
    printed: list = []

    def record(*args, **_kwargs) -> None:
        printed.append(tuple(normal(a) for a in args))

    namespace = {"__name__": "oracle_case", "print": record}
    outcomes = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            exec(compile(text, "oracle_case.py", "exec"), namespace)
        except Exception as exc:
            return {"<module>": Outcome(tuple(printed), None, (type(exc).__name__, bool(_CUDA_MISSING.search(str(exc)))))}
        outcomes["<module>"] = Outcome(tuple(printed), None, None)
        for name in names:
            printed.clear()
            state = torch.random.get_rng_state()
            try:
                returned = namespace[name]()
            except Exception as exc:
                outcomes[name] = Outcome(tuple(printed), None, (type(exc).__name__, bool(_CUDA_MISSING.search(str(exc)))))
            else:
                outcomes[name] = Outcome(tuple(printed), normal(returned), None)
            torch.random.set_rng_state(state)
    return outcomes


def differences(original: dict[str, Outcome], migrated: dict[str, Outcome]) -> list[str]:
    """Where the migrated programs behave otherwise than the originals (empty: none)."""
    found = []
    for name, before in original.items():
        after = migrated.get(name)
        if after is None:
            found.append(f"{name}: not run after migration ({migrated})")
        elif before.error is not None and before.error[1]:
            if after.error is not None or after.printed[: len(before.printed)] != before.printed:
                found.append(f"{name}: the original failed only for want of CUDA ({before}); migrated: {after}")
        elif after != before:
            found.append(f"{name}: original {before}; migrated {after}")
    return found


def oracle(text: str, names: list[str]) -> list[str]:
    """Migrate `text`, run both, and say every difference and refusal."""
    result = migrate_source(text, "oracle_case.py")
    if result.error is not None:
        return [f"refused: {result.error}"]
    problems = []
    if migrate_source(result.migrated, "oracle_case.py").migrated != result.migrated:
        problems.append("a second migration changes the migrated code")
    for rule_id in _MARKER.findall(result.migrated):
        if rule_id not in KEPT:
            problems.append(f"marker for {rule_id}: {knowledge.rules()[rule_id].summary}")
    torch.manual_seed(0)
    original = execute(text, names)
    assert original["<module>"].error is None, f"the generated module does not run: {original}"
    torch.manual_seed(0)
    problems += differences(original, execute(result.migrated, names))
    return problems


@pytest.fixture(scope="module", autouse=True)
def helper_module_and_process_group(tmp_path_factory):
    """The generated helper module on sys.path (as it sits beside migrated code), and a one-process gloo group for DDP."""
    folder = tmp_path_factory.mktemp("oracle")
    (folder / "_accelport_compat.py").write_text(module_text())
    sys.path.insert(0, str(folder))
    started = False
    if torch.distributed.is_available() and not torch.distributed.is_initialized():
        store = torch.distributed.FileStore(str(folder / "store"), 1)
        torch.distributed.init_process_group("gloo", store=store, rank=0, world_size=1)
        started = True
    yield
    if started:
        torch.distributed.destroy_process_group()
    sys.path.remove(str(folder))
    sys.modules.pop("_accelport_compat", None)


# --------------------------------------------------------------------------- the tests


@settings(max_examples=MODULES, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(module())
def test_generated_programs_behave_the_same_after_migration(case):
    text, names = case
    assert oracle(text, names) == []


def _single(lines: list[str]) -> tuple[str, list[str]]:
    return PRELUDE + "\ndef program_0():\n" + "".join(f"    {line}\n" for line in lines), ["program_0"]


# Failures the oracle found (minimised by hypothesis), kept as explicit cases.
REGRESSIONS = [
    ['d = "cuda" if torch.cuda.is_available() else "cpu"', "print(d)"],  # was collapsed to "cuda"
    ['choose = lambda: "cuda" if torch.cuda.is_available() else "cpu"', "print(choose())"],
    ["print([1 for _ in range(2) if torch.cuda.current_device()])"],  # the fallback did not parse
    ["x = torch.ones(2).pin_memory()", "print(x)"],  # left for manual work: crashed
    ["torch.backends.cudnn.deterministic = False", "print(torch.are_deterministic_algorithms_enabled())"],
    ["print(torch.cuda.is_bf16_supported())"],  # the helper said True on the CPU
    ["with torch.cuda.amp.autocast():", "    y = torch.ones(2, 2) @ torch.ones(2, 2)", "print(y)"],  # bf16 on the CPU
    ["scaler = torch.cuda.amp.GradScaler()", "print(scaler.scale(torch.tensor(2.0)))"],  # scaled on the CPU
    ["print(torch.ones(2).is_cuda)"],  # True on the CPU
    ["print(f'{torch.cuda.memory_stats()}')"],  # {} where the original printed OrderedDict()
    # A class body cannot see the function's `device`: NameError.
    ["device = torch.device('cpu')", "class Config:", "    device = torch.ones(1).cuda()", "print(Config.device)"],
    # A local `device` that holds no device is not one to pass on.
    ["device = torch.cuda.memory_allocated()", "print(device, torch.cuda.memory_stats_as_nested_dict())"],
    ["print(not ('nccl' if torch.cuda.is_available() else 'gloo'))"],
]


@pytest.mark.parametrize("lines", REGRESSIONS, ids=range(len(REGRESSIONS)))
def test_regressions(lines):
    assert oracle(*_single(lines)) == []


def test_the_oracle_catches_a_planted_collapse(monkeypatch):
    """The bug issue 20 started from: the conditional collapsed to its CUDA branch. The oracle must see it."""
    import ast

    from accelport.migrate.codemods import replace_with

    def collapse(site, ctx):  # what migrate wrote before: `d = "cuda"`
        node = site.node
        return replace_with(site, node, '"cuda"') if isinstance(node, ast.IfExp) else None

    monkeypatch.setitem(codemods.load(), "AP9002", collapse)
    found = oracle(*_single(['d = "cuda" if torch.cuda.is_available() else "cpu"', "x = torch.zeros(1, device=d)", "print(x)"]))
    assert any("program_0" in problem for problem in found), found


def test_outcomes_tell_a_cuda_failure_from_another():
    outcomes = execute(PRELUDE + "def a():\n    torch.cuda.synchronize()\n\ndef b():\n    raise ValueError('x')\n", ["a", "b"])
    assert outcomes["a"].error == ("AssertionError", True)
    assert outcomes["b"].error == ("ValueError", False)
    assert differences({"b": outcomes["b"]}, {"b": Outcome((), None, None)})  # not failing where it did is a difference
    assert collections.Counter(type(v).__name__ for v in outcomes.values())["Outcome"] == 3


def test_the_oracle_catches_pinning_left_for_manual_work(monkeypatch):
    monkeypatch.setitem(codemods.load(), "AP1605", lambda site, ctx: None)
    found = oracle(*_single(["x = torch.ones(2).pin_memory()", "print(x)"]))
    assert any("AP1605" in problem for problem in found) and any("program_0" in problem for problem in found), found
