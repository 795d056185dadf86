"""`accelport ops`: formats, exit codes, one-line errors, user lists, and the demo step."""

from __future__ import annotations

import json

import pytest


@pytest.fixture(autouse=True)
def no_env_lists(monkeypatch):
    monkeypatch.delenv("ACCELPORT_OPLISTS", raising=False)


def test_missing_fast_path_kernel_fails_with_module_and_advice(cli, model_spec):
    result = cli("ops", model_spec("encoder_eval"), "--target", "npu", "musa")
    assert result.code == 1, result.err
    assert "FakeTensorMode" in result.out  # says how it was traced
    line = next(ln for ln in result.out.splitlines() if ln.startswith("npu") and "_transformer_encoder_layer_fwd" in ln)
    assert "missing" in line and "encoder.layers.0 (TransformerEncoderLayer)" in line and "coverage_models.py:74" in line
    assert "set_fastpath_enabled(False)" in result.out
    assert not any(ln.startswith("musa") and "missing" in ln for ln in result.out.splitlines())


def test_json_holds_the_same_verdicts_as_the_table(cli, model_spec):
    table = cli("ops", model_spec("encoder_eval"), "--target", "npu")
    data = json.loads(cli("ops", model_spec("encoder_eval"), "--target", "npu", "--format", "json").out)
    summary = data["targets"][0]["summary"]
    row = next(ln.split() for ln in table.out.splitlines() if ln.startswith("npu ") and "torch_npu" in ln)
    assert [int(n) for n in row[-6:]] == [summary[k] for k in ("native", "delegate", "composite", "unknown", "fallback", "missing")]
    assert data["failed"] is True and data["trace"]["strategy"] == "fake" and data["trace"]["mode"] == "infer"
    assert data["targets"][0]["oplist"]["source"].startswith("torch-npu 2.13.0 wheel")


@pytest.mark.parametrize(("fmt", "marker"), [("md", "| target | checked against |"), ("html", "<!DOCTYPE html>")])
def test_markdown_and_html_reports(cli, model_spec, tmp_path, fmt, marker):
    out = tmp_path / f"report.{fmt}"
    result = cli("ops", model_spec("encoder_eval"), "--target", "npu", "--format", fmt, "-o", out)
    assert result.code == 1 and result.out == ""
    text = out.read_text()
    assert marker in text and "_transformer_encoder_layer_fwd" in text and "encoder.layers.0" in text


def test_a_covered_training_step_exits_zero(cli, model_spec):
    result = cli("ops", model_spec("tiny_lm"), "--target", "npu", "--tracer", "meta")
    assert result.code == 0, result.out + result.err
    assert "train step" in result.out and "meta device" in result.out and "ok: every operator" in result.out


def test_a_data_dependent_model_says_which_tracer_worked(cli, model_spec):
    result = cli("ops", model_spec("masked"), "--target", "npu", "--format", "json")
    trace = json.loads(result.out)["trace"]
    assert [a["strategy"] for a in trace["attempts"]] == ["meta", "fake"]
    assert trace["attempts"][0]["ok"] is False and "nonzero" in trace["attempts"][0]["reason"]


def test_a_user_list_is_used_and_listed(cli, model_spec, tmp_path):
    site = tmp_path / "npu-site.txt"
    site.write_text("# vendor = npu\n# version = 9.9\n# source = our cluster\nembedding\n_transformer_encoder_layer_fwd\n")
    result = cli("ops", model_spec("encoder_eval"), "--target", "npu", "--oplist", site)
    assert result.code == 0, result.out
    assert "npu     9.9" in result.out or "npu 9.9" in result.out
    listed = json.loads(cli("ops", "--lists", "--oplist", site, "--format", "json").out)
    mine = next(o for o in listed if o["origin"] == str(site))
    assert (mine["vendor"], mine["version"], mine["source"], mine["op_count"]) == ("npu", "9.9", "our cluster", 2)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--target", "nosuch"), "unknown vendor 'nosuch'"),
        (("--target", "rocm"), "no operator list for vendor 'rocm'"),
        (("--target", "rocm"), "or check on the machine itself against its dispatcher (--oplist FILE, or --on-device)"),
        (("--smoke",), "--smoke runs operators on the device"),
        (("--target", "npu@1.0"), "no operator list for npu@1.0"),
    ],
)
def test_usage_errors_are_one_line_exit_2(cli, model_spec, args, message):
    result = cli("ops", model_spec("tiny_lm"), *args)
    assert result.code == 2
    assert message in result.err and len(result.err.strip().splitlines()) == 1


def test_missing_factory_file_is_exit_2(cli):
    result = cli("ops", "no/such/model.py:factory")
    assert result.code == 2 and "no/such/model.py: no such file" in result.err


def test_a_factory_that_raises_is_one_line_naming_it_exit_2(cli, model_spec):
    result = cli("ops", model_spec("raising_factory"), "--target", "npu")
    assert result.code == 2
    assert len(result.err.strip().splitlines()) == 1 and "Traceback" not in result.err
    assert "coverage_models.py:raising_factory: the factory raised RuntimeError: checkpoint weights.pt not found" in result.err


def test_a_loss_function_that_raises_is_named_exit_2(cli, model_spec):
    result = cli("ops", model_spec("bad_loss"), "--target", "npu")
    assert result.code == 2 and len(result.err.strip().splitlines()) == 1
    assert "coverage_models.py:bad_loss" in result.err
    assert "the loss function shape_checked_loss raised ValueError: targets (3,) do not fit the output (3, 2)" in result.err


def test_demo_step_shows_the_example_on_four_backends(cli, tmp_path):
    result = cli("demo", "--only", "step30", "--output-dir", tmp_path / "demo")
    assert result.code == 0, result.out + result.err
    for vendor in ("npu", "musa", "mlu", "xpu"):
        assert any(ln.startswith(vendor) for ln in result.out.splitlines())
    report = json.loads((tmp_path / "demo" / "ops-train.json").read_text())
    assert report["trace"]["model"] == "TinyLM" and report["trace"]["mode"] == "train"
    assert (tmp_path / "demo" / "ops-infer.html").is_file()


def test_tracing_keeps_torchs_warnings_and_logs_off_the_terminal(model_spec, subprocess_env):
    import subprocess
    import sys

    command = [sys.executable, "-m", "accelport", "ops", model_spec("noisy"), "--target", "npu"]
    result = subprocess.run(command, capture_output=True, text=True, env=subprocess_env, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "ok: every operator" in result.stdout
    assert result.stderr == ""
    # Without the silencing, the same build warns and the logger speaks.
    models = model_spec("noisy").rsplit(":", 1)[0]
    probe = f"import runpy; m = runpy.run_path({models!r}); m['noisy']()[0](m['torch'].randn(2, 3, 8))"
    loud = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=subprocess_env, timeout=300)
    assert "enable_nested_tensor is True" in loud.stderr and "tracing-time chatter" in loud.stderr


def test_silencing_is_undone_after_the_trace(model_spec):
    import logging
    import warnings

    from accelport.coverage import trace

    trace(model_spec("noisy"), strategy="meta")  # torch's imports add their own filters: let them happen first
    logger = logging.getLogger("torch.fx.experimental.symbolic_shapes")
    logger.setLevel(logging.INFO)
    try:
        filters = list(warnings.filters)
        trace(model_spec("noisy"), strategy="meta")
        assert logger.level == logging.INFO and warnings.filters == filters
    finally:
        logger.setLevel(logging.NOTSET)


def test_mps_is_judged_on_the_unfused_ops_torch_runs_there(cli, model_spec):
    # torch takes the fused encoder fast path only on cpu, cuda, xpu and PrivateUse1 (npu):
    # on mps it runs layer_norm, linear, ... so mps must not be told it lacks the fused kernel.
    result = cli("ops", model_spec("encoder_eval"), "--target", "npu", "mps", "--format", "json")
    data = json.loads(result.out)
    by_vendor = {t["vendor"]: t for t in data["targets"]}
    assert list(by_vendor) == ["npu", "mps"]  # in the order given
    ops = {vendor: {v["op"] for v in t["ops"]} for vendor, t in by_vendor.items()}
    assert "_transformer_encoder_layer_fwd" in ops["npu"]
    assert "_transformer_encoder_layer_fwd" not in ops["mps"]
    assert "native_layer_norm" in ops["mps"] and "native_layer_norm" not in ops["npu"]
    assert any("fast paths off" in note for note in by_vendor["mps"]["notes"])
    assert not any("fast paths off" in note for note in by_vendor["npu"]["notes"])
