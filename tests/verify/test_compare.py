"""`accelport compare`: metrics, alignment, mapping files, truncation, output formats and exit codes."""

from __future__ import annotations

import csv
import io
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from accelport.errors import UserError
from accelport.verify import capture
from accelport.verify.numerics import dumpfile
from accelport.verify.numerics.compare import compare_dumps


def run(folder: Path, fn, tensors: bool = True) -> Path:
    with capture(folder, step_on="manual", tensors=tensors):
        fn()
    return folder


def test_tensor_metrics_match_an_independent_computation(tmp_path):
    rng = np.random.default_rng(0)
    a = rng.standard_normal(5000).astype(np.float32)
    b = a + rng.standard_normal(5000).astype(np.float32) * np.float32(2e-3)
    b[17] = a[17] + 0.25  # one large error
    ref = run(tmp_path / "r", lambda: torch.from_numpy(a) * 2.0)
    test = run(tmp_path / "t", lambda: torch.from_numpy(b) * 2.0)
    with compare_dumps(ref, test) as result:
        rows = [r for r in result.rows() if r["op"] == "aten.mul.Tensor"]
    m = rows[0]["metrics"]
    r, t = (a * 2).astype(np.float64), (b * 2).astype(np.float64)
    d = t - r
    assert m["max_abs"] == pytest.approx(np.abs(d).max(), rel=1e-6)
    assert m["rmse"] == pytest.approx(np.sqrt((d**2).mean()), rel=1e-5)
    assert m["cosine"] == pytest.approx(r @ t / np.linalg.norm(r) / np.linalg.norm(t), rel=1e-6)
    assert m["rel_l2"] == pytest.approx(np.linalg.norm(d) / np.linalg.norm(r), rel=1e-5)
    # float32 across devices: rtol = atol = 1e-3
    assert m["allclose"] == pytest.approx(np.mean(np.abs(d) <= 1e-3 + 1e-3 * np.abs(r)), abs=1e-9)
    small = 2.0**-14
    assert m["max_rel"] == pytest.approx(np.max(np.abs(d) / np.maximum(np.abs(r), small)), rel=1e-4)
    assert m["max_ulp"] == pytest.approx(
        np.max(np.abs(d) / np.spacing(np.abs(r).astype(np.float32))), rel=1e-4
    )
    # The input differs too: it is a model input-like leaf, held to its largest error.
    assert rows[0]["inputs_ok"] is False


def test_nan_positions_must_agree(tmp_path):
    a = torch.tensor([1.0, float("nan"), 3.0, 4.0])
    b = torch.tensor([1.0, 2.0, float("nan"), 4.0])
    ref = run(tmp_path / "r", lambda: a.clone() + 0)
    test = run(tmp_path / "t", lambda: b.clone() + 0)
    with compare_dumps(ref, test) as result:
        add = next(r for r in result.rows() if r["op"] == "aten.add.Tensor")
    assert add["status"] == "fail" and "NaN/Inf positions differ (2 NaN" in add["reason"]


def test_an_extra_cast_on_one_side_is_aligned_around_and_benign(tmp_path):
    x = torch.linspace(-1, 1, 64)

    def plain():
        torch.tanh(torch.relu(x) * 3)

    def with_cast():
        torch.tanh(torch.relu(x).to(torch.float64).to(torch.float32) * 3)

    ref = run(tmp_path / "r", plain, tensors=False)
    test = run(tmp_path / "t", with_cast, tensors=False)
    with compare_dumps(ref, test) as result:
        assert result.passed
        assert result.counts["only_test"] == 2 and result.counts["benign_extra"] == 2
        assert result.counts["matched"] == 3


def manual_layer_norm(x):
    m = x.mean(-1, keepdim=True)
    v = ((x - m) ** 2).mean(-1, keepdim=True)
    return (x - m) / torch.sqrt(v + 1e-5)


def test_mapping_file_pairs_renamed_and_fused_ops(tmp_path):
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(0))
    ref = run(tmp_path / "r", lambda: torch.tanh(torch.relu(manual_layer_norm(x))))
    test = run(tmp_path / "t", lambda: torch.tanh(torch.clamp_min(F.layer_norm(x, (8,)), 0)))
    with compare_dumps(ref, test) as unmapped:
        assert unmapped.counts["only_ref"] >= 8 and unmapped.counts["matched"] <= 1
    mapping = tmp_path / "map.toml"
    mapping.write_text(
        """
[rename.ops]
"aten.clamp_min.default" = "aten.relu.default"

[[fuse]]
name = "layer_norm"
ref = ["aten.mean.dim", "aten.sub.Tensor", "aten.pow.Tensor_Scalar", "aten.mean.dim", "aten.sub.Tensor",
       "aten.add.Tensor", "aten.sqrt.default", "aten.div.Tensor"]
test = ["aten.native_layer_norm.default"]
"""
    )
    with compare_dumps(ref, test, mapping=mapping) as mapped:
        rows = list(mapped.rows())
        assert mapped.passed, mapped.reasons
        assert mapped.counts["only_ref"] == 0 and mapped.counts["only_test"] == 0
        assert [r["op"] for r in rows] == ["layer_norm", "aten.relu.default", "aten.tanh.default"]
        assert rows[0]["status"] == "pass" and rows[0]["source"] == "tensor"


def test_bad_mapping_file_is_a_user_error(tmp_path):
    ref = run(tmp_path / "r", lambda: torch.ones(2) + 1, tensors=False)
    bad = tmp_path / "map.toml"
    bad.write_text("[[fuse]]\nref = ['aten.add.Tensor']\n")
    with pytest.raises(UserError, match="needs `name`"):
        compare_dumps(ref, ref, mapping=bad)


@pytest.fixture
def pair(tmp_path) -> tuple[Path, Path]:
    x = torch.linspace(-2, 2, 256)
    ref = run(tmp_path / "ref", lambda: torch.relu(x) * 2, tensors=False)
    test = run(tmp_path / "test", lambda: torch.relu(x) * 2.5, tensors=False)
    return ref, test


def test_cli_exit_codes_and_json_contract(cli, pair):
    ref, test = pair
    same = cli("compare", ref, ref, "--format", "json")
    assert same.code == 0 and json.loads(same.out)["verdict"] == "pass"
    diff = cli("compare", ref, test, "--format", "json")
    assert diff.code == 1
    data = json.loads(diff.out)
    assert data["verdict"] == "fail"
    assert data["first_divergence"]["op"] == "aten.mul.Tensor"
    assert {"ref", "test"} <= set(data["truncated"])
    for key in ("op", "module", "call_index", "source_line"):
        assert key in data["first_divergence"]


def test_cli_formats(cli, pair, tmp_path):
    ref, test = pair
    table = cli("compare", ref, test)
    assert "verdict: FAIL" in table.out and "first divergence: aten.mul.Tensor" in table.out
    rows = list(csv.DictReader(io.StringIO(cli("compare", ref, test, "--format", "csv").out)))
    assert [r["op"] for r in rows] == ["aten.relu.default", "aten.mul.Tensor"]
    assert rows[1]["status"] == "fail" and float(rows[1]["score"]) > 1
    assert cli("compare", ref, test, "--format", "markdown").out.startswith(
        "# accelport compare: FAIL"
    )
    out = tmp_path / "report.html"
    assert cli("compare", ref, test, "--format", "html", "-o", out).code == 1
    html = out.read_text()
    assert (
        "<svg" in html
        and "Error per layer" in html
        and "http://" not in html.replace("http://www.w3.org/2000/svg", "")
    )


def test_cli_bad_inputs_are_one_line_errors(cli, pair, tmp_path):
    ref, _ = pair
    missing = cli("compare", ref, tmp_path / "nope")
    assert (
        missing.code == 2
        and missing.err.count("\n") == 1
        and "not an accelport dump" in missing.err
    )
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    lines = (ref / dumpfile.MANIFEST).read_text().splitlines()
    lines[2] = lines[2][:10]
    (damaged / dumpfile.MANIFEST).write_text("\n".join(lines) + "\n")
    result = cli("compare", ref, damaged)
    assert result.code == 2 and "damaged" in result.err and "Traceback" not in result.err
    assert cli("compare", ref, ref, "--tol", "float32=abc").code == 2


def test_cli_truncated_dump_reports_then_exits_2(cli, pair, tmp_path):
    ref, _ = pair
    cut = tmp_path / "cut"
    cut.mkdir()
    text = (ref / dumpfile.MANIFEST).read_text()
    (cut / dumpfile.MANIFEST).write_text(
        text[: text.rindex('{"k":"op"') + 25]
    )  # half of the last op line
    result = cli("compare", ref, cut, "--format", "json")
    assert result.code == 2 and "truncated" in result.err
    data = json.loads(result.out)
    assert data["truncated"]["test"] and "cut off" in data["truncated"]["test_detail"]
    allowed = cli("compare", ref, cut, "--allow-truncated")
    assert allowed.code == 0 and "TRUNCATED: TEST dump" in allowed.out


def test_tolerance_override_changes_the_verdict(tmp_path):
    x = torch.linspace(0.5, 2, 128)
    ref = run(tmp_path / "r", lambda: x * 1.0, tensors=False)
    test = run(tmp_path / "t", lambda: x * 1.005, tensors=False)
    with compare_dumps(ref, test) as strict:
        assert not strict.passed
    with compare_dumps(ref, test, tolerances={"float32": (1e-2, 1e-2)}) as loose:
        assert loose.passed
    assert math.isfinite(loose.seconds)


@pytest.mark.parametrize("window", [3, 8, 2048])
def test_windowed_alignment_pairs_every_common_record(window):
    from accelport.verify.numerics.align import align

    def rec(name, step=0):
        return {
            "k": "op",
            "step": step,
            "phase": "forward",
            "module": "m",
            "op": name,
            "out": [{"shape": [2]}],
        }

    ref = [rec(f"op{i}") for i in range(20)] + [rec("tail", 1), rec("only_ref_step", 1)]
    test = [rec(f"op{i}") for i in range(20) if i != 15]
    test.insert(5, rec("extra_a"))
    test.insert(12, rec("extra_b"))
    test += [rec("tail", 1)]
    pairs = list(align(iter(ref), iter(test), window=window))
    matched = [(r["op"], t["op"]) for r, t in pairs if r and t]
    assert matched == [(f"op{i}", f"op{i}") for i in range(20) if i != 15] + [("tail", "tail")]
    assert sorted(t["op"] for r, t in pairs if r is None) == ["extra_a", "extra_b"]
    assert sorted(r["op"] for r, t in pairs if t is None) == ["only_ref_step", "op15"]


def test_checksums_prove_identical_tensors_without_reading_them(tmp_path):
    x = torch.linspace(-3, 3, 1000)
    options = {"step_on": "manual", "checksums": True}
    with capture(tmp_path / "a", **options):
        torch.exp(x)
    with capture(tmp_path / "b", **options):
        torch.exp(x)
    with capture(tmp_path / "c", **options):
        torch.exp(x * 1.0000001)
    with compare_dumps(tmp_path / "a", tmp_path / "b") as same:
        assert same.passed and all(r["source"] == "checksum" for r in same.rows())
    with compare_dumps(tmp_path / "a", tmp_path / "c") as close:
        sources = {r["op"]: r.get("source") for r in close.rows()}
        assert (
            close.passed and sources["aten.exp.default"] == "stats"
        )  # bits differ: judged by value


def test_huge_finite_values_compare_without_overflow(tmp_path):
    big = torch.finfo(torch.float32).max
    x = torch.tensor([big, -big, 1.0, 0.5] * 64)
    ref = run(tmp_path / "r", lambda: torch.neg(x))
    test = run(tmp_path / "t", lambda: torch.neg(x))
    with compare_dumps(ref, test) as result:
        assert result.passed, result.reasons


@pytest.mark.parametrize("tensors", [True, False], ids=["tensors", "stats"])
def test_one_wrong_element_in_100k_fails_the_default_criterion(tmp_path, tensors):
    """The L2 of a 100k-element tensor hides one element off by 10; the element guard does not."""
    rng = np.random.default_rng(1)
    x = np.clip(rng.standard_normal(100_000) * 50, -250, 250).astype(np.float32)
    x[4321] = 300.0
    data = torch.from_numpy(x)
    ref = run(tmp_path / "r", lambda: torch.clamp(data, max=300.0), tensors=tensors)
    test = run(tmp_path / "t", lambda: torch.clamp(data, max=290.0), tensors=tensors)  # only x[4321] changes
    with compare_dumps(ref, test) as result:
        row = next(r for r in result.rows() if r["op"] == "aten.clamp.default")
        assert not result.passed
        assert result.first_divergence["op"] == "aten.clamp.default"
    assert row["status"] == "fail" and row["inputs_ok"] is True
    if tensors:
        m = row["metrics"]
        assert m["max_abs"] == pytest.approx(10.0)
        # The norm rule alone would pass this tensor: its relative L2 error is far below rtol.
        assert m["rel_l2"] < 1e-3
    if tensors:
        with compare_dumps(ref, test, replay="none") as plain:
            row = next(r for r in plain.rows() if r["op"] == "aten.clamp.default")
        assert "max |diff| 10 > allowed 3" in row["reason"] and "element guard" in row["reason"]
    # The same pair with no wrong element passes.
    clean = run(tmp_path / "c", lambda: torch.clamp(data, max=300.0), tensors=tensors)
    with compare_dumps(ref, clean) as same:
        assert same.passed


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('rename = "ops"\n', "`rename` must be a table"),
        ("[rename]\nops = ['aten.add.Tensor']\n", r"\[rename.ops\] must map names to names"),
        ("[rename.modules]\nencoder = 3\n", r"\[rename.modules\] must map names to names"),
        ("[fuse]\nname = 'x'\n", "`fuse` must be an array of tables"),
        ("[[fuse]]\nname = 'ln'\nref = 'aten.add.Tensor'\n", "`ref` must be a list of op names"),
        ("[[fuse]]\nname = 'ln'\ntest = [1, 2]\n", "`test` must be a list of op names"),
        ("[renames.ops]\na = 'b'\n", "unknown key 'renames'"),
    ],
)
def test_mapping_file_with_wrong_types_is_one_line_exit_2(cli, pair, tmp_path, content, message):
    bad = tmp_path / "map.toml"
    bad.write_text(content)
    result = cli("compare", *pair, "--map", bad)
    assert result.code == 2 and "Traceback" not in result.err
    assert len(result.err.strip().splitlines()) == 1
    assert str(bad) in result.err

    assert re.search(message, result.err), result.err
    folder = cli("compare", *pair, "--map", tmp_path)
    assert folder.code == 2 and "cannot read the mapping file" in folder.err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--tol", "float32=-1e-3,1e-3"), "--tol float32=-1e-3,1e-3: RTOL and ATOL must be finite, not negative"),
        (("--tol", "float32=0,0"), "not both 0"),
        (("--tol", "*=nan,1e-3"), "--tol *=nan,1e-3: RTOL and ATOL must be finite"),
        (("--replay-ratio", "0"), "--replay-ratio 0.0: K must be a number above 0"),
        (("--replay-ratio", "-2"), "--replay-ratio -2.0: K must be a number above 0"),
        (("--window", "0"), "--window 0: give a whole number of at least 1"),
        (("--top", "-1"), "--top -1: give a whole number of at least 0"),
    ],
)
def test_bad_numeric_options_are_one_line_exit_2(cli, pair, args, message):
    result = cli("compare", *pair, *args)
    assert result.code == 2 and len(result.err.strip().splitlines()) == 1
    assert message in result.err, result.err


def test_bad_numeric_options_in_code_are_user_errors(pair):
    # Called from Python the error names the function's parameter, never a command-line flag.
    with pytest.raises(UserError, match=r"^replay_ratio=inf: K must be") as ratio:
        compare_dumps(*pair, replay_ratio=float("inf"))
    with pytest.raises(UserError, match=r"^tolerances=float32=-1.0,0.0: RTOL") as tolerance:
        compare_dumps(*pair, tolerances={"float32": (-1.0, 0.0)})
    assert "--" not in str(ratio.value) + str(tolerance.value)
