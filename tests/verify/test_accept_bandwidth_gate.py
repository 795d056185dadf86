"""accept's collectives bandwidth gate: the check fails just below `min_busbw_gbps` and passes at it.

The result's average bus bandwidth is 95 GB/s; floors around it, not far from it, are what
tell a correct gate from one that is 10x too loose or too strict.
"""

from __future__ import annotations

import json

import pytest

from accelport.verify.stability import comm


def _spec(tmp_path, floor: float) -> str:
    rows = [comm.CommRow(c, 4096, 1024, "float32", "sum", -1, 50.0, busbw, busbw, 0)
            for c in ("all_reduce", "all_gather") for busbw in (90.0, 100.0)]  # fmt: skip
    result = comm.CommResult(2, "gloo", "cpu", rows)
    assert result.avg_busbw() == 95.0
    (tmp_path / "comm.json").write_text(json.dumps(result.to_dict()))
    spec = tmp_path / "spec.toml"
    spec.write_text(f'[[collectives]]\nresult = "comm.json"\nmin_busbw_gbps = {floor}\n')
    return str(spec)


@pytest.mark.parametrize(
    ("floor", "code", "status"),
    [(100.0, 1, "fail"), (95.1, 1, "fail"), (95.0, 0, "pass"), (90.0, 0, "pass"), (9.5, 0, "pass")],
)
def test_bandwidth_gate_fails_below_the_floor_and_passes_at_it(cli, tmp_path, floor, code, status):
    result = cli("accept", _spec(tmp_path, floor), "--output-dir", tmp_path / "report", "--format", "json")
    assert result.code == code, result.err
    (check,) = json.loads(result.out)["checks"]
    assert check["section"] == "collectives" and check["status"] == status
    if status == "fail":
        assert f"average bus bandwidth 95 GB/s below {floor} GB/s" in check["summary"]
