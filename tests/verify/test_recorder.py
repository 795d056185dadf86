"""The compiled per-op path of the capture (recorder.py, _recorder.c) writes what the Python path writes.

Every workload runs twice in one process, once through each path, and the two manifests
must be equal record for record (the header differs only in its time and in naming the
path). The workloads reach every branch of the compiled path: forward, backward and
optimizer phases, cache hits and misses, in-place ops and out=, views (passed through,
expanded, recorded when asked), aliases, uninitialised outputs, NaN/Inf, integer, bool,
bfloat16 and strided tensors, inference mode, filters, phases, mid-step flushes, keyword
and odd arguments, and source lines after a chdir.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).parent))
from numerics_helpers import tinylm, train_step

from accelport.verify import capture
from accelport.verify.numerics import dumpfile, recorder


@pytest.fixture(autouse=True)
def compiled_recorder():
    """The extension; where a C compiler and Python's headers are present it must load."""
    from accelport import native
    from accelport.verify.numerics import native as stats_native

    if native.disabled(recorder.ENV_VAR, stats_native.ENV_VAR):
        pytest.skip("compiled helpers turned off (ACCELPORT_NATIVE / ACCELPORT_DUMP_RECORDER / ACCELPORT_DUMP_NATIVE)")
    module = recorder.load()
    if module is None:
        assert native.compiler() is None or native.python_include() is None, (
            "a C compiler and Python's headers are here, but the compiled recorder did not load"
        )
        pytest.skip("no C compiler or no Python headers here: only the Python path (tested everywhere else) runs")
    return module


def manifest(folder: Path) -> list[dict]:
    header = dumpfile.read_header(folder)
    rows = [{k: v for k, v in header.items() if k not in ("created", "recorder")}]
    for record in dumpfile.iter_records(folder):
        if record["k"] == "end":
            record = {k: v for k, v in record.items() if k != "closed"}
        rows.append(record)
    return rows


def both(tmp_path: Path, work, setup=lambda: None, **options) -> tuple[list[dict], list[dict]]:
    """The manifests of `work(made)` recorded through the compiled path and through Python,
    `made` being what `setup()` builds before the capture starts (a model: its weights are
    made from uninitialised memory, which must not be read inside the capture)."""
    out = []
    for compiled in (True, False):
        folder = tmp_path / ("compiled" if compiled else "python")
        torch.manual_seed(0)
        made = setup()
        with capture(folder, compiled=compiled, **options) as cap:
            assert cap.recorder == ("compiled" if compiled else "python")
            work(made)
        out.append(manifest(folder))
    return out[0], out[1]


def assert_same(compiled: list[dict], python: list[dict]) -> None:
    assert len(compiled) == len(python)
    for a, b in zip(compiled, python, strict=True):
        assert a == b, (a.get("seq"), a.get("op"))


def tinylm_and_optimizer() -> tuple[nn.Module, torch.optim.Optimizer]:
    model = tinylm().train()
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3)


def tinylm_steps(made) -> None:
    model, optimizer = made
    for _ in range(2):
        optimizer.zero_grad(set_to_none=True)
        train_step(model)
        optimizer.step()


def test_a_training_step_is_recorded_the_same_by_both_paths(tmp_path):
    compiled, python = both(tmp_path, tinylm_steps, tinylm_and_optimizer)
    assert sum(r["k"] == "op" for r in compiled) > 200
    assert_same(compiled, python)


@pytest.mark.parametrize("options", [
    {"flush_every": 1},
    {"flush_every": 7, "views": True},
    {"phases": ["forward"]},
    {"phases": ["forward", "backward", "optimizer"]},
    {"modules": ["TinyLM.blocks.0*"]},
    {"ops": ["aten.mm*", "aten.add*"]},
    {"steps": "1..1"},
])  # fmt: skip
def test_options_change_both_paths_alike(tmp_path, options):
    compiled, python = both(tmp_path, tinylm_steps, tinylm_and_optimizer, **options)
    assert_same(compiled, python)


def test_autocast_bfloat16_is_recorded_the_same(tmp_path):
    compiled, python = both(tmp_path, lambda model: train_step(model, autocast=torch.bfloat16), tinylm,
                            step_on="manual")  # fmt: skip
    assert any(d["dtype"] == "bfloat16" for r in compiled if r["k"] == "op" for d in r["out"])
    assert_same(compiled, python)


def odd_tensors(_made) -> None:
    x = torch.tensor([1.0, float("nan"), float("inf"), -3.0, 0.0, 2.0], requires_grad=True)
    y = x * 2
    y.t().sum()
    z = torch.arange(24.0).reshape(4, 6)
    z.t().contiguous().exp()  # a strided input copied, then measured
    z[:, ::2].abs()  # a strided view with gaps, measured where used
    z.expand(2, 4, 6).sum(dim=0)  # expand: statistics scaled
    z.unsqueeze(0).expand(3, 4, 6).mean()
    w = torch.empty(5)  # uninitialised: its statistics are not read
    w.fill_(3.0)
    w.add_(1.0).mul_(2.0)  # in place, twice: the version to come
    torch.add(z, 1.0, out=torch.empty(4, 6))  # out=
    torch.arange(10).sum()  # integers
    (z > 3).sum()  # bool
    z.to(torch.bfloat16).sum()  # bfloat16
    z.to(torch.float64).std()  # float64
    torch.zeros(0).sum()  # empty
    z.clone().detach().view(-1).argmax()  # alias, detach, view
    torch.softmax(z, dim=-1, dtype=torch.float32)  # keyword argument, dtype argument
    torch.nn.functional.pad(z, (1, 1), value=float("-inf"))
    with torch.no_grad():
        z.add_(0.5)
    a, b = torch.split(z, 3, dim=1)
    torch.cat([a, b], dim=0).sum()
    with torch.inference_mode():
        v = torch.ones(3).exp()
        v.mul_(2)
        v.t().sum()


def test_odd_tensors_and_arguments_are_recorded_the_same(tmp_path):
    compiled, python = both(tmp_path, odd_tensors, step_on="manual")
    ops = {r["op"] for r in compiled if r["k"] == "op"}
    assert {"aten.add_.Tensor", "aten.add.out", "aten.empty.memory_format", "aten.cat.default"} <= ops
    assert_same(compiled, python)


def test_source_lines_follow_a_chdir_in_both_paths(tmp_path, monkeypatch):
    def work(_made):
        monkeypatch.chdir(tmp_path)
        x = torch.ones(3)
        for folder in (Path(__file__).parent, tmp_path):
            monkeypatch.chdir(folder)
            torch.neg(x)

    compiled, python = both(tmp_path, work, step_on="manual")
    lines = [r["line"] for r in compiled if r.get("op") == "aten.neg.default"]
    assert lines[0].startswith(Path(__file__).name) and lines[1] == f"{Path(__file__)}:{lines[0].split(':')[1]}"
    assert_same(compiled, python)


def test_backward_modules_and_gradient_accumulation_match(tmp_path):
    def work(model):
        x = torch.randn(5, 4)
        model(x).sum().backward()
        model(x).sum().backward()

    def setup():
        return nn.Sequential(nn.Linear(4, 3), nn.Identity(), nn.ReLU(), nn.Linear(3, 2))

    compiled, python = both(tmp_path, work, setup, step_on="manual")
    assert any(r.get("node", "").endswith("AccumulateGrad") for r in compiled)
    assert_same(compiled, python)


def test_the_compiled_path_is_off_where_it_does_not_apply(tmp_path, monkeypatch):
    with capture(tmp_path / "t", tensors=True) as cap:
        assert cap.recorder == "python"
    with capture(tmp_path / "c", checksums=True) as cap:
        assert cap.recorder == "python"
    with capture(tmp_path / "d", stats_on_host=False) as cap:
        assert cap.recorder == "python"
    monkeypatch.setenv("ACCELPORT_DUMP_RECORDER", "0")
    with capture(tmp_path / "off") as cap:
        assert cap.recorder == "python"
    assert dumpfile.read_header(tmp_path / "off")["recorder"] == "python"


def test_statistics_and_arguments_equal_the_python_rules():
    from accelport.verify.numerics import dump

    module = recorder.load()
    stats = dump._Stats(True)
    for t in (torch.randn(1000), torch.randn(70000), torch.randn(300, dtype=torch.float64),
              torch.randn(513).to(torch.bfloat16), torch.tensor([float("nan"), 1.0, -float("inf"), 0.0])):  # fmt: skip
        assert module.stats_of(t) == stats.compute(t)
    assert module.stats_of(torch.arange(5)) is None  # integers: Python's way
    assert module.stats_of(torch.randn(4, 6).t()) is None  # strided: Python's way
    odd = (torch.ones(2), nn.Parameter(torch.ones(1)), 3, 2.5, float("nan"), [1, 2.0, [float("inf")]],
           None, True, "name", torch.float16, torch.device("cpu"), torch.contiguous_format, (1, 2))  # fmt: skip
    kwargs = {"dim": -1, "dtype": torch.bfloat16, "out": torch.empty(1), "alpha": float("-inf")}
    assert module.describe_args(odd, kwargs) == dump._describe_args(odd, kwargs)


def test_device_statistics_take_the_same_way_through_the_compiled_path(tmp_path):
    """On an accelerator the compiled path hands each tensor to the Python statistics, which
    batch it on the device and give an index filled in at the flush; emulated on the CPU
    by a recorder with no kernel and statistics told to batch, against the Python path."""
    from accelport.verify.numerics import native as stats_native

    module = recorder.load()
    config = recorder._config(stats_native.kernels())
    module.setup({**config, **{k: 0 for k in config if k.startswith(("sweep_", "par_"))}})
    folders = {}
    try:
        for compiled in (True, False):
            folders[compiled] = tmp_path / str(compiled)
            made = tinylm_and_optimizer()
            with capture(folders[compiled], compiled=compiled, flush_every=7) as cap:
                assert cap.recorder == ("compiled" if compiled else "python")
                cap._stats.host, cap._stats.native = False, None  # batched, as on a device
                tinylm_steps(made)
    finally:
        module.setup(config)
    compiled, python = manifest(folders[True]), manifest(folders[False])
    assert all(isinstance(d["stats"], list) for r in compiled if r["k"] == "op" for d in r["out"] if d["stats"])
    assert_same(compiled, python)


def test_a_field_table_of_another_version_or_length_is_refused(tmp_path, monkeypatch, caplog):
    """setup() takes only the table its enums were written for, and changes nothing when it
    refuses one; a load whose table is refused leaves the capture on the Python path."""
    import logging

    from accelport.verify.numerics import native as stats_native
    from accelport.verify.numerics import recorder_fields

    module = recorder.load()
    config = recorder._config(stats_native.kernels())
    version, attributes, methods, entries = config["fields"]
    for fields in (
        (version + 1, attributes, methods, entries),
        (version, attributes[:-1], methods, entries),
        (version, attributes, (*methods, "_extra"), entries),
        (version, attributes, methods, entries[1:]),
    ):
        with pytest.raises(ValueError, match="field table"):
            module.setup({**config, "fields": fields})
    compiled, python = both(tmp_path / "after", tinylm_steps, tinylm_and_optimizer)  # still set up as before
    assert_same(compiled, python)

    monkeypatch.setattr(recorder_fields, "FIELDS_VERSION", version + 1)
    recorder.reset()
    try:
        with caplog.at_level(logging.INFO, logger=recorder.__name__):
            assert recorder.load() is None
        assert f"field table version {version + 1}" in caplog.text
        with capture(tmp_path / "refused") as cap:
            assert cap.recorder == "python"
            torch.ones(3).exp()
        assert dumpfile.read_header(tmp_path / "refused")["recorder"] == "python"
    finally:
        monkeypatch.undo()
        recorder.reset()
    assert recorder.load() is not None
