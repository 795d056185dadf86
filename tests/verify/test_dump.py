"""`accelport.verify.capture`: what a dump records, and that its numbers are right."""

from __future__ import annotations

import json
import math
import os
import sys
import warnings
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).parent))
from numerics_helpers import dump, tinylm, train_step

from accelport.errors import UserError
from accelport.verify import capture
from accelport.verify.numerics import dumpfile


def records(folder: Path) -> list[dict]:
    return list(dumpfile.iter_records(folder))


@pytest.fixture(scope="module")
def tinylm_dump(tmp_path_factory) -> Path:
    return dump(tmp_path_factory.mktemp("dump") / "run", tinylm())


def test_every_record_has_a_stable_identity(tinylm_dump):
    recs = [r for r in records(tinylm_dump) if r["k"] != "step"]
    ops = [r for r in recs if r["k"] == "op"]
    assert {r["phase"] for r in ops} == {"forward", "backward"}
    ln = [r for r in ops if r.get("op") == "aten.native_layer_norm.default"]
    assert [r["module"] for r in ln] == [
        "TinyLM.blocks.0.ln1",
        "TinyLM.blocks.0.ln2",
        "TinyLM.blocks.1.ln1",
        "TinyLM.blocks.1.ln2",
        "TinyLM.ln_f",
    ]
    assert all(
        r["line"].startswith("examples/legacy_cuda_app/model.py:") or "model.py:" in r["line"]
        for r in ln
    )
    # Call indices count per (phase, module, op): the two batched matmuls of one attention.
    bmm = [
        r["call"]
        for r in ops
        if r["module"] == "TinyLM.blocks.0.attn"
        and r["op"] == "aten.bmm.default"
        and r["phase"] == "forward"
    ]
    assert bmm == [0, 1]
    # Backward ops are attributed to the module whose backward runs them.
    back_ln = [r for r in ops if r.get("op") == "aten.native_layer_norm_backward.default"]
    assert back_ln and back_ln[0]["module"] == "TinyLM.ln_f"
    assert all(r.get("node") for r in back_ln)
    assert [r["seq"] for r in recs] == sorted(r["seq"] for r in recs)


def test_views_are_listed_where_they_are_used_with_their_producer(tmp_path):
    x = torch.randn(6, 4)
    with capture(tmp_path / "plain", step_on="manual"):
        y = x.exp()  # producer
        z = (y.t().reshape(4, 6).unsqueeze(0) * 2).sum()
        w = y.t().contiguous()  # a transposed view read in its own order, then copied
        e = y[0].expand(3, 4).sum()
    ops = [r for r in records(tmp_path / "plain") if r["k"] == "op"]
    names = [r["op"] for r in ops]
    assert not set(names) & {"aten.t.default", "aten.view.default", "aten.unsqueeze.default",
                             "aten._unsafe_view.default", "aten.expand.default"}  # fmt: skip
    exp = next(r for r in ops if r["op"] == "aten.exp.default")
    mul = next(r for r in ops if r["op"] == "aten.mul.Tensor")
    # The multiply's input is the exp's output seen through three views: same numbers, its
    # own shape, and the exp named as where it came from.
    assert mul["in"][0]["src"] == exp["seq"] and mul["in"][0]["shape"] == [1, 4, 6]
    assert mul["in"][0]["stats"] == exp["out"][0]["stats"]
    clone = next(r for r in ops if r["op"] == "aten.clone.default")
    assert clone["in"][0]["src"] == exp["seq"] and clone["in"][0]["shape"] == [4, 6]
    # An expand repeats its input's elements: sums and counts scale, the rest stays.
    expand_sum = [r for r in ops if r["op"] == "aten.sum.default"][-1]
    row = y[0].expand(3, 4)
    got = [float(v) for v in expand_sum["in"][0]["stats"]]
    assert got[0:3] == pytest.approx([float(row.min()), float(row.max()), float(row.mean())], rel=1e-6)
    assert got[3] == pytest.approx(float(row.norm()), rel=1e-6)
    assert float(z) == pytest.approx(float(y.sum() * 2)) and w.shape == (4, 6) and float(e) > 0
    # Asked for, the views are records of their own.
    with capture(tmp_path / "views", step_on="manual", views=True):
        (x.exp().t().reshape(4, 6) * 2).sum()
    names = [r["op"] for r in records(tmp_path / "views") if r["k"] == "op"]
    assert "aten.t.default" in names and any(n in names for n in ("aten.view.default", "aten._unsafe_view.default"))


def test_parameters_and_inputs_are_recorded_before_the_ops_that_use_them(tinylm_dump):
    recs = records(tinylm_dump)
    params = [r for r in recs if r["k"] == "param"]
    model = tinylm()
    assert {(r["module"], r["op"]) for r in params} == {
        (f"TinyLM.{name.rpartition('.')[0]}".rstrip("."), f"param:{name.rpartition('.')[2]}")
        for name, _ in model.named_parameters()
    }
    inputs = [r for r in recs if r["k"] == "input"]
    assert len(inputs) == 1 and inputs[0]["out"][0]["dtype"] == "int64"
    first_use = next(
        r["seq"] for r in recs if r["k"] == "op" and r["module"] == "TinyLM.blocks.0.mlp.0"
    )
    weight = next(
        r for r in params if r["module"] == "TinyLM.blocks.0.mlp.0" and r["op"] == "param:weight"
    )
    assert weight["seq"] < first_use
    # Parameters of step 0 carry the CRC-32 of their bytes.
    expected = zlib.crc32(model.blocks[0].mlp[0].weight.detach().numpy().tobytes())
    assert weight["out"][0]["crc32"] == expected


def test_statistics_match_an_independent_computation(tmp_path):
    x = torch.tensor([[1.5, -2.0, 0.0], [3.25, 0.0, -0.5]])

    class Double(nn.Module):
        def forward(self, t):
            return t * 2

    with capture(tmp_path / "d", step_on="manual"):
        Double()(x)
    op = next(r for r in records(tmp_path / "d") if r.get("op") == "aten.mul.Tensor")
    stats = dict(zip(dumpfile.STAT_FIELDS, op["out"][0]["stats"], strict=True))
    y = (x * 2).numpy().astype(np.float64)
    assert stats["min"] == y.min() and stats["max"] == y.max()
    assert math.isclose(stats["mean"], y.mean(), rel_tol=1e-6)
    assert math.isclose(stats["l2"], float(np.sqrt((y**2).sum())), rel_tol=1e-6)
    assert math.isclose(stats["abs_mean"], float(np.abs(y).mean()), rel_tol=1e-6)
    assert (stats["nan"], stats["inf"], stats["zero"]) == (0, 0, 2)
    assert op["module"] == "Double" and op["in"][0]["stats"][1] == 3.25


def test_nan_and_inf_are_counted_and_kept_out_of_the_statistics(tmp_path):
    x = torch.tensor([1.0, float("nan"), float("inf"), -3.0, float("nan")])
    with capture(tmp_path / "d", step_on="manual"):
        torch.relu(x)
    out = next(r for r in records(tmp_path / "d") if r.get("op") == "aten.relu.default")["in"][0]
    stats = dict(zip(dumpfile.STAT_FIELDS, out["stats"], strict=True))
    assert (stats["nan"], stats["inf"]) == (2, 1)
    assert (stats["min"], stats["max"], stats["mean"]) == (-3.0, 1.0, -1.0)


def assert_same_statistics(host: Path, device: Path) -> None:
    """Every tensor of two dumps of the same run has the same statistics (or none in both)."""
    for a, b in zip(records(host), records(device), strict=True):
        for key in ("in", "out"):
            for ta, tb in zip(a.get(key, []), b.get(key, []), strict=True):
                if ta.get("stats") is None:
                    assert tb.get("stats") is None
                    continue
                assert np.allclose(
                    [float(v) for v in ta["stats"]], [float(v) for v in tb["stats"]], rtol=1e-5, atol=1e-6
                ), (a.get("op"), key)


def test_device_batched_statistics_equal_the_host_ones(tmp_path):
    host = dump(tmp_path / "host", tinylm())
    assert_same_statistics(host, dump(tmp_path / "device", tinylm(), stats_on_host=False))


@pytest.mark.parametrize("flush_every", [1, 7])
def test_device_statistics_survive_a_flush_between_producer_and_user(tmp_path, flush_every):
    """A tensor measured before a mid-step flush and used after it keeps its own numbers."""
    host = dump(tmp_path / "host", tinylm())
    assert_same_statistics(host, dump(tmp_path / "device", tinylm(), stats_on_host=False, flush_every=flush_every))


def test_device_statistics_through_optimizer_steps_and_small_flushes(tmp_path):
    """The end-of-step flush runs from the optimizer's hook, outside any op, and copies the
    device statistics with torch ops of accelport's own: none of them may be recorded (nor
    measured into the batch being copied)."""
    folders = {}
    for host in (True, False):
        model = tinylm().train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        folders[host] = tmp_path / str(host)
        torch.manual_seed(0)
        with capture(folders[host], stats_on_host=host, flush_every=7):
            for _ in range(2):
                optimizer.zero_grad(set_to_none=True)
                train_step(model)
                optimizer.step()
    assert not [r for r in records(folders[False]) if r.get("op") == "aten.stack.default"]
    assert_same_statistics(folders[True], folders[False])


def test_in_place_ops_are_seen_with_the_input_before_and_the_output_after(tmp_path):
    x = torch.ones(4)
    with capture(tmp_path / "d", step_on="manual"):
        x.add_(2.0)
    op = next(r for r in records(tmp_path / "d") if r.get("op") == "aten.add_.Tensor")
    assert op["in"][0]["stats"][1] == 1.0 and op["out"][0]["stats"][1] == 3.0


def test_a_tensor_changed_in_place_is_measured_once_and_its_users_name_the_change(tmp_path):
    """torch bumps an in-place op's version counter after the op returns: the cached
    description must be kept under the version to come, so the next user of the tensor
    reuses it (and names the in-place op as its producer) instead of reading it again."""
    x = torch.arange(6.0)
    with capture(tmp_path / "d", step_on="manual"):
        y = x.exp()
        y.mul_(2.0)
        y.add_(1.0)
        torch.neg(y)
        y.t().sum()  # through a view: same tensor, same producer
    ops = [r for r in records(tmp_path / "d") if r.get("k") == "op"]
    seq = {r["op"]: r["seq"] for r in ops}
    add, neg, total = (next(r for r in ops if r["op"] == name)
                       for name in ("aten.add_.Tensor", "aten.neg.default", "aten.sum.default"))  # fmt: skip
    assert add["in"][0]["src"] == seq["aten.mul_.Tensor"]
    assert neg["in"][0]["src"] == total["in"][0]["src"] == seq["aten.add_.Tensor"]
    want = x.exp() * 2 + 1
    assert neg["in"][0]["stats"][:2] == pytest.approx([float(want.min()), float(want.max())], rel=1e-6)
    assert total["in"][0]["stats"] == neg["in"][0]["stats"]


def test_a_transposed_parameter_keeps_the_parameter_record_as_its_source(tmp_path):
    """A weight seen through t() by addmm/mm: the view shares the parameter's version
    counter once the op returns, so its description is the parameter's, not a new reading."""
    model = nn.Sequential(nn.Linear(4, 3))
    with capture(tmp_path / "d", step_on="manual"):
        model(torch.randn(2, 4, requires_grad=True)).sum().backward()
    recs = records(tmp_path / "d")
    weight = next(r for r in recs if r["k"] == "param" and r["op"] == "param:weight")
    addmm = next(r for r in recs if r.get("op") == "aten.addmm.default")
    assert [d.get("src") for d in addmm["in"]][2] == weight["seq"]
    assert addmm["in"][2]["shape"] == [4, 3] and addmm["in"][2]["stats"] == weight["out"][0]["stats"]


def test_inference_mode_is_recorded_and_in_place_changes_are_seen(tmp_path):
    """Inference tensors have no version counter: nothing of theirs is cached, every use is measured."""
    x = torch.arange(1.0, 7.0)
    with torch.inference_mode(), capture(tmp_path / "d", step_on="manual"):
        y = x.exp()
        z = y.t()
        y.mul_(2.0)
        torch.neg(z)
    ops = [r for r in records(tmp_path / "d") if r.get("k") == "op"]
    neg = next(r for r in ops if r["op"] == "aten.neg.default")
    assert neg["in"][0]["stats"][1] == pytest.approx(float(x.exp().max() * 2), rel=1e-6)


def test_full_tensors_are_safetensors_files_readable_by_the_reference_reader(tmp_path):
    from safetensors.torch import load_file

    model = tinylm()
    folder = dump(
        tmp_path / "t", model, tensors=True, step=lambda m: train_step(m, autocast=torch.bfloat16)
    )
    files = sorted((folder / "tensors").glob("*.safetensors"))
    assert len(files) == 1
    loaded = load_file(files[0])
    weight = next(r for r in records(folder) if r["k"] == "param" and r["module"] == "TinyLM.head")
    key = next(k for k in loaded if k.startswith(f"{weight['seq']}.out"))
    assert torch.equal(loaded[key], model.head.weight.detach())
    assert any(v.dtype == torch.bfloat16 for v in loaded.values())


def test_steps_and_filters_limit_what_is_recorded(tmp_path):
    model = tinylm()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def three_steps():
        for _ in range(3):
            train_step(model)
            optimizer.step()
            optimizer.zero_grad()

    with capture(tmp_path / "d", steps="1..1", modules=["TinyLM.blocks.1*"]):
        three_steps()
    recs = [r for r in records(tmp_path / "d") if r["k"] != "step"]
    assert recs and {r["step"] for r in recs} == {1}
    assert all(r["module"].startswith("TinyLM.blocks.1") for r in recs)


def test_dump_refuses_a_folder_that_is_not_empty(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "old.txt").write_text("keep me")
    with pytest.raises(UserError, match="not empty"), capture(tmp_path / "d"):
        pass
    assert (tmp_path / "d" / "old.txt").read_text() == "keep me"


def test_header_records_environment_and_end_record_closes(tinylm_dump):
    lines = (tinylm_dump / dumpfile.MANIFEST).read_text().splitlines()
    header, end = json.loads(lines[0]), json.loads(lines[-1])
    assert header["format"] == "accelport-dump" and header["mode"] == "statistics"
    assert header["machine"]["torch"]["version"] == torch.__version__
    assert (
        "deterministic_algorithms" in header["determinism"]
        and "torch_initial_seed" in header["seeds"]
    )
    assert end["k"] == "end" and end["records"] == len(lines) - 2
    info = dumpfile.DumpInfo(tinylm_dump, {})
    list(dumpfile.iter_records(tinylm_dump, info))
    assert not info.truncated


def test_statistics_of_a_large_tensor_with_zeros_and_an_inf(tmp_path):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1_200_001, generator=g)
    x[::7] = 0.0
    x[123_456] = float("inf")
    with capture(tmp_path / "d", step_on="manual"):
        torch.neg(x)
    stats = dict(
        zip(
            dumpfile.STAT_FIELDS,
            next(r for r in records(tmp_path / "d") if r.get("op") == "aten.neg.default")["out"][0][
                "stats"
            ],
            strict=True,
        )
    )
    y = -x.numpy().astype(np.float64)
    finite = y[np.isfinite(y)]
    assert (stats["min"], stats["max"]) == (finite.min(), finite.max())
    assert stats["mean"] == pytest.approx(finite.mean(), rel=1e-4, abs=1e-6)
    assert stats["l2"] == pytest.approx(np.sqrt((finite**2).sum()), rel=1e-5)
    assert stats["abs_mean"] == pytest.approx(np.abs(finite).mean(), rel=1e-5)
    assert (stats["nan"], stats["inf"], stats["zero"]) == (0, 1, int((finite == 0).sum()))


def test_values_whose_squares_overflow_float32_still_get_statistics(tmp_path):
    big = torch.finfo(torch.float32).max
    x = torch.tensor([big, -big, 1.0, 0.0])
    with capture(tmp_path / "d", step_on="manual"):
        torch.neg(x)
    stats = next(r for r in records(tmp_path / "d") if r.get("op") == "aten.neg.default")["out"][0][
        "stats"
    ]
    assert stats[3] == pytest.approx(math.sqrt(2) * big, rel=1e-6)  # L2 in float64
    assert stats[4] == pytest.approx((2 * big + 1) / 4, rel=1e-6) and stats[7] == 1


def test_permuted_and_expanded_tensors_get_the_statistics_of_their_elements(tmp_path):
    x = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4) - 5
    permuted = x.permute(2, 0, 1)  # made before the capture: first seen as tanh's input
    assert not permuted.is_contiguous()
    with capture(tmp_path / "d", step_on="manual"):
        y = permuted.tanh()  # a non-contiguous input that fills its memory: read in place
        z = torch.ones(1, 4).expand(3, 4).exp()  # an expanded one (stride 0)
    recs = {r.get("op"): r for r in records(tmp_path / "d")}
    for op, value in (
        ("aten.tanh.default", x.permute(2, 0, 1)),
        ("aten.exp.default", torch.ones(3, 4)),
    ):
        stats = dict(zip(dumpfile.STAT_FIELDS, recs[op]["in"][0]["stats"], strict=True))
        v = value.contiguous().numpy().astype(np.float64)
        assert (stats["min"], stats["max"], stats["zero"]) == (
            v.min(),
            v.max(),
            int((v == 0).sum()),
        )
        assert stats["mean"] == pytest.approx(v.mean()) and stats["l2"] == pytest.approx(
            np.sqrt((v**2).sum())
        )
    assert y.shape == (4, 2, 3) and z.shape == (3, 4)


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 1))


def test_optimizer_ops_skip_the_dispatch_mode_and_it_comes_back_after_the_step(tmp_path):
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    model = _net()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    x = torch.randn(5, 4)
    seen: list[tuple[str, bool]] = []
    with capture(tmp_path / "d") as cap:
        on_op = cap._on_op

        def counting(func, args, kwargs):
            seen.append((str(func), cap._in_optimizer > 0))
            return on_op(func, args, kwargs)

        cap._on_op = counting
        for _ in range(2):
            model(x).pow(2).mean().backward()
            optimizer.step()
            optimizer.zero_grad()
            assert _get_current_dispatch_mode() is cap._mode
    numeric_in_step = [op for op, inside in seen if inside and not op.startswith("profiler.")]
    assert numeric_in_step == []  # AdamW's own ops never reached the capture
    recs = records(tmp_path / "d")
    for step in (0, 1):  # both steps recorded in full: forward and backward
        assert {r["phase"] for r in recs if r.get("step") == step and r["k"] == "op"} == {
            "forward",
            "backward",
        }


def test_a_raising_optimizer_step_does_not_stop_recording(tmp_path):
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    class Failing(torch.optim.SGD):
        def step(self, closure=None):
            with torch.no_grad():
                for group in self.param_groups:
                    for p in group["params"]:
                        p.mul_(1.0)  # an op inside the step, while the mode is off
            raise RuntimeError("planted")

    model = _net()
    optimizer = Failing(model.parameters(), lr=0.1)
    x = torch.randn(5, 4)
    with capture(tmp_path / "d", step_on="manual") as cap:
        model(x).pow(2).mean().backward()
        with pytest.raises(RuntimeError, match="planted"):
            optimizer.step()
        cap.step()
        assert _get_current_dispatch_mode() is cap._mode  # put back by step()
        model(x).pow(2).mean().backward()
        with pytest.raises(RuntimeError, match="planted"):
            optimizer.step()
        # No step() this time: the next forward puts the mode back, ops outside modules too.
        y = model(x)
        (y * 2.0).sum().backward()
    recs = [r for r in records(tmp_path / "d") if r["k"] == "op"]
    first = {(r["phase"], r["module"], r["op"]) for r in recs if r["step"] == 0}
    second = {(r["phase"], r["module"], r["op"]) for r in recs if r["step"] == 1}
    assert ("forward", "Sequential.0", "aten.addmm.default") in first
    # Recorded after each raising step, in the right phase (not "optimizer").
    assert sum(1 for r in recs if r["step"] == 1 and r["op"] == "aten.addmm.default") == 4
    assert ("forward", "", "aten.mul.Tensor") in second
    assert any(p == "backward" for p, _, _ in second)
    assert not any(r["phase"] == "optimizer" for r in recs)


def test_a_closure_optimizer_still_records_its_forward_and_backward(tmp_path):
    model = _net()
    optimizer = torch.optim.LBFGS(model.parameters(), max_iter=2)
    x = torch.randn(5, 4)

    def closure():
        optimizer.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        return loss

    with capture(tmp_path / "d"):
        optimizer.step(closure)
    recs = [r for r in records(tmp_path / "d") if r["k"] == "op"]
    assert any(r["phase"] == "backward" and r["module"] == "Sequential.0" for r in recs)


def test_backward_ops_belong_to_the_module_whose_forward_made_their_autograd_node(tinylm_dump):
    """Each backward op is attributed to the module that created the node running it: layer
    norm gradients to LayerNorm modules, addmm's to Linear modules, the attention's to the
    attention (not to its dropout, which returns its input unchanged in eval), embedding
    gradients to the embedding."""
    types = {f"TinyLM.{name}" if name else "TinyLM": type(m).__name__
             for name, m in tinylm().named_modules()}  # fmt: skip
    expected = {"NativeLayerNormBackward0": "LayerNorm", "AddmmBackward0": "Linear",
                "EmbeddingBackward0": "Embedding", "SoftmaxBackward0": "Attention",
                "BmmBackward0": "Attention", "MaskedFillBackward0": "Attention"}  # fmt: skip
    backward = [r for r in records(tinylm_dump) if r.get("phase") == "backward"]
    seen = set()
    for r in backward:
        if r.get("node") in expected:
            assert types[r["module"]] == expected[r["node"]], (r["op"], r["node"], r["module"])
            seen.add(r["node"])
    assert seen == set(expected)
    # Two layer norms of one block are told apart by their own nodes.
    ln = [r["module"] for r in backward if r["op"] == "aten.native_layer_norm_backward.default"]
    assert ln[0] == "TinyLM.ln_f" and {"TinyLM.blocks.0.ln1", "TinyLM.blocks.0.ln2"} <= set(ln)


def test_gradient_accumulation_belongs_to_the_parameters_module(tmp_path):
    model = nn.Sequential(nn.Linear(4, 3), nn.Identity(), nn.ReLU(), nn.Linear(3, 2))
    x = torch.randn(5, 4)
    with capture(tmp_path / "d", step_on="manual"):
        model(x).sum().backward()
        model(x).sum().backward()  # no zero_grad: the second backward adds into .grad
    accumulate = [r for r in records(tmp_path / "d") if r.get("node", "").endswith("AccumulateGrad")]
    assert sorted({r["module"] for r in accumulate}) == ["Sequential.0", "Sequential.3"]
    relu = [r for r in records(tmp_path / "d") if r.get("op") == "aten.threshold_backward.default"]
    assert {r["module"] for r in relu} == {"Sequential.2"}


@pytest.mark.parametrize("stats_on_host", [True, False])
def test_a_tensor_listed_by_several_records_has_the_same_numbers_in_each(tmp_path, stats_on_host):
    """Statistics mode builds a tensor's description once and shares it between the records
    that list it; the numbers must be those of the tensor in every record, across flushes, with
    NaN/Inf written as strings, and an in-place op must not leave its input's old numbers behind."""
    x = torch.tensor([1.0, float("nan"), float("inf"), -3.0, 0.0, 2.0])
    with capture(tmp_path / "d", step_on="manual", stats_on_host=stats_on_host, flush_every=1):
        y = x * 2  # y: produced here, then listed as an input three times (a flush after each record)
        torch.abs(y)
        torch.neg(y)
        y.add_(1.0)  # in place: its input is y before, its output y after
        torch.abs(y)
    recs = [r for r in records(tmp_path / "d") if r.get("k") == "op"]
    by_op = {}
    for r in recs:
        by_op.setdefault(r["op"], []).append(r)

    def expected(values: torch.Tensor) -> list:
        v = values.double().numpy()
        finite = v[np.isfinite(v)]
        want = [finite.min(), finite.max(), finite.mean(), np.sqrt((finite**2).sum()),
                np.abs(finite).mean(), np.isnan(v).sum(), np.isinf(v).sum(), (finite == 0).sum()]  # fmt: skip
        return [float(w) for w in want]

    def numbers(desc: dict) -> list:
        assert all(isinstance(s, float) or s in ("nan", "inf", "-inf") for s in desc["stats"])
        return [float(s) for s in desc["stats"]]

    before, after = x * 2, x * 2 + 1
    produced = by_op["aten.mul.Tensor"][0]["out"][0]
    uses = [by_op["aten.abs.default"][0]["in"][0], by_op["aten.neg.default"][0]["in"][0],
            by_op["aten.add_.Tensor"][0]["in"][0]]  # fmt: skip
    for desc in [produced, *uses]:
        assert np.allclose(numbers(desc), expected(before), rtol=1e-6), desc
        assert desc["stats"][5] == 1.0 and desc["stats"][6] == 1.0  # one NaN, one Inf (the 2*inf)
    assert all(desc.get("src") == produced["src"] for desc in uses)
    changed = [by_op["aten.add_.Tensor"][0]["out"][0], by_op["aten.abs.default"][1]["in"][0]]
    for desc in changed:
        assert np.allclose(numbers(desc), expected(after), rtol=1e-6), desc


def test_user_code_lines_follow_the_working_directory(tmp_path, monkeypatch):
    """The source line is written relative to the working directory at the time of the op."""
    monkeypatch.chdir(Path(__file__).parent)
    x = torch.ones(3)
    with capture(tmp_path / "d", step_on="manual"):
        for _ in range(2):
            torch.neg(x)
            monkeypatch.chdir(tmp_path)
    lines = [r["line"] for r in records(tmp_path / "d") if r.get("op") == "aten.neg.default"]
    assert lines[0].startswith(f"{Path(__file__).name}:")
    assert lines[1] == f"{Path(__file__)}:{lines[0].split(':')[1]}"


def test_compiled_code_under_a_capture_runs_and_is_recorded(tmp_path):
    """The capture keeps Dynamo out of its own frames (as torch's wrapper of __torch_dispatch__
    does); a torch.compile'd function still gives its result and its ops are recorded."""
    torch._dynamo.reset()

    def f(x):
        return (x.sin() * 2).relu().sum()

    compiled = torch.compile(f, backend="eager")
    x = torch.randn(8, requires_grad=True)
    with warnings.catch_warnings(record=True) as caught, capture(tmp_path / "d", step_on="manual"):
        warnings.simplefilter("always")
        y = compiled(x)
        y.backward()
    # Dynamo never tried to trace the capture's own frames.
    assert not [w for w in caught if "Dynamo" in str(w.message)], [str(w.message) for w in caught]
    assert float(y.detach()) == pytest.approx(float(f(x).detach()), rel=1e-6)
    ops = [r["op"] for r in records(tmp_path / "d") if r.get("k") == "op"]
    assert {"aten.sin.default", "aten.relu.default", "aten.cos.default"} <= set(ops)
    torch._dynamo.reset()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork (POSIX)")
def test_a_forked_child_records_nothing(tmp_path):
    """A process forked while a capture runs (a DataLoader worker) must not write into it."""
    x = torch.ones(3)
    with capture(tmp_path / "d", step_on="manual", flush_every=1):
        torch.neg(x)
        pid = os.fork()
        if pid == 0:  # the child: ops that must not be recorded, then leave without cleanup
            try:
                torch.exp(x)
                torch.exp(x)
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        torch.abs(x)
    ops = [r["op"] for r in records(tmp_path / "d") if r.get("k") == "op"]
    assert ops == ["aten.neg.default", "aten.abs.default"]


def test_module_marks_do_not_grow_without_gradients(tmp_path):
    """Backward attribution marks autograd's sequence number at each module entry and exit;
    a long run with gradients off (inference, no step ever ended) must not pile them up."""
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    with torch.no_grad(), capture(tmp_path / "d", step_on="manual") as cap:
        for _ in range(50):
            model(torch.randn(2, 4))
        assert len(cap._marks) <= 1
    with capture(tmp_path / "g", step_on="manual") as cap:
        for _ in range(3):
            model(torch.randn(2, 4, requires_grad=True)).sum().backward()
        assert len(cap._marks) > 3  # with gradients, every module boundary that follows nodes counts
