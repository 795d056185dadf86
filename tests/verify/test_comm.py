"""comm: gloo collectives across 2 and 4 local processes; a planted wrong reduction is caught."""

from __future__ import annotations

import json

import pytest

from accelport.verify.stability import comm

pytest.importorskip("torch", reason="comm runs torch.distributed (pip install 'accelport[torch]')")


def test_two_ranks_every_collective_exact(tmp_path):
    result = comm.run(2, sizes=(1 << 10, 1 << 14), iters=3, warmup=1, workdir=tmp_path, timeout_s=120)
    assert result.errors == [] and result.passed
    assert result.backend == "gloo"
    assert {r.collective for r in result.rows} == set(comm.COLLECTIVES)
    for row in result.rows:
        assert row.wrong == 0 and row.time_us > 0
        assert row.busbw == pytest.approx(row.algbw * comm.bus_factor(row.collective, 2))
        assert row.algbw == pytest.approx(row.size / 1e9 / (row.time_us / 1e6))


def test_four_ranks_and_the_nccl_tests_layout(cli, tmp_path):
    saved = tmp_path / "comm.json"
    done = cli("comm", "--ranks", "4", "-b", "1K", "-e", "1K", "--iters", "2", "--warmup-iters", "1", "--save", saved)
    assert done.code == 0, done.out + done.err
    assert "#       size         count      type   redop    root     time   algbw   busbw #wrong" in done.out
    assert "# Out of bounds values : 0 OK" in done.out
    data = json.loads(saved.read_text())
    assert data["ranks"] == 4 and data["verdict"] == "pass" and len(data["rows"]) == 5


def test_planted_wrong_reduction_is_caught(cli, tmp_path, monkeypatch):
    # Every rank imports this module first: all_reduce computes MAX where SUM was asked.
    (tmp_path / "wrong_reduction.py").write_text(
        "import torch.distributed as dist\n"
        "_real = dist.all_reduce\n"
        "def all_reduce(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):\n"
        "    return _real(tensor, op=dist.ReduceOp.MAX, group=group, async_op=async_op)\n"
        "dist.all_reduce = all_reduce\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    done = cli("comm", "--ranks", "2", "-b", "4K", "-e", "4K", "--iters", "2", "--warmup-iters", "1",
               "--collectives", "all_reduce,all_gather", "--preload", "wrong_reduction", "--format", "json")
    assert done.code == 1
    data = json.loads(done.out)
    wrong = {r["collective"]: r["wrong"] for r in data["rows"]}
    assert wrong["all_reduce"] == 2 * 1024 and wrong["all_gather"] == 0
    assert data["verdict"] == "fail"


def test_bus_factors_follow_nccl_tests():
    assert comm.bus_factor("all_reduce", 4) == pytest.approx(1.5)
    assert comm.bus_factor("all_gather", 4) == pytest.approx(0.75)
    assert comm.bus_factor("broadcast", 4) == 1.0
    assert comm.sizes_between(8, 64, 2) == [8, 16, 32, 64]
    assert comm.parse_size("16M") == 16 << 20
