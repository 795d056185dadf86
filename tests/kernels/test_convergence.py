"""Convergence proof, short version: a tiny HF-style Llama trained from one seed with plain PyTorch, patch() and
enable() gives loss curves that `accelport curves` passes; the same run with a planted kernel fault fails.

The long run (hundreds of steps) is `benchmarks/kernels_convergence.py`; this one takes 16 SGD steps of a model
small enough for the interpreter (hidden 16, 2 query heads over 1 KV head), in which the loss falls from 3.6 to 2.2.
"""

from __future__ import annotations

import json

import pytest

from accelport.kernels import convergence, rms_norm

from . import llama_block
from .mutants import load_copy

CONFIG = {"hidden_size": 16, "intermediate_size": 32, "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 32}
STEPS = 16
# fp32 runs of the same math: the kernel runs stay within 1e-6 of torch's loss (measured 2e-7), so a 0.1% band
# is a thousand times that (the planted fault ends 0.45% off); curves' default 1% is for runs across hardware.
TOLERANCE = "0.001"


def _factory(seed):
    return llama_block.build(seed, **CONFIG)


def _run(mode, path):
    return convergence.train(_factory, llama_block.loss_of, mode, path, steps=STEPS, vocab=CONFIG["vocab_size"], lr=0.1)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    path = tmp_path_factory.mktemp("curves") / "torch.jsonl"
    losses = _run("torch", path)
    assert losses[-1] < 0.75 * losses[0]  # the run trains: a curve that stays flat would prove nothing
    return path


@pytest.mark.parametrize("mode", ["patch", "enable"])
def test_kernel_runs_follow_the_torch_curve_under_accelport_curves(cli, reference, tmp_path, mode):
    path = tmp_path / f"{mode}.jsonl"
    _run(mode, path)
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == list(range(STEPS))
    result = cli("curves", reference, path, "--tolerance", TOLERANCE, "--format", "json")
    assert result.code == 0, result.out
    assert json.loads(result.out)["verdict"] == "pass"


def test_a_planted_kernel_fault_makes_the_curve_diverge(cli, reference, tmp_path, monkeypatch):
    """RMSNorm's backward kernel loses its mean term in the source: the forward is right, training goes elsewhere."""
    mutant = load_copy(
        "accelport.kernels.rms_norm", tmp_path, "dx = rstd * (dyw - x_hat * (tl.sum(dyw * x_hat, axis=0) / n_cols))", "dx = rstd * dyw"
    )
    monkeypatch.setattr(rms_norm, "_rms_norm_bwd", mutant._rms_norm_bwd)  # what the patched norms' backward launches
    path = tmp_path / "faulty.jsonl"
    _run("patch", path)
    result = cli("curves", reference, path, "--tolerance", TOLERANCE, "--format", "json")
    assert result.code == 1 and json.loads(result.out)["verdict"] == "fail", result.out
