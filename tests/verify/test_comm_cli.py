"""comm: option ranges and --save paths are checked before any rank starts (no torch needed)."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--ranks", "1"], "--ranks 1: must be 2 <= ranks"),
        (["-f", "1"], "--step-factor 1: must be 2 <= step-factor"),
        (["--iters", "0"], "--iters 0: must be 1 <= iters"),
        (["--warmup-iters", "-2"], "--warmup-iters -2: must be 0 <= warmup-iters"),
        (["--timeout", "0"], "--timeout 0: must be 0 < timeout"),
        (["-b", "4K", "-e", "1K"], "need 0 < min (4096) <= max (1024)"),
        (["-b", "lots"], "size 'lots'"),
        (["--save", "{tmp}/missing/c.json"], "folder {tmp}/missing does not exist"),
    ],
)
def test_cli_comm_out_of_range_options_are_one_line_usage_errors(cli, tmp_path, arguments, message):
    done = cli("comm", *[a.format(tmp=tmp_path) for a in arguments], "--output-dir", tmp_path / "work")
    assert done.code == 2, done.out + done.err
    assert message.format(tmp=tmp_path) in done.err and len(done.err.strip().splitlines()) == 1, done.err
    assert not (tmp_path / "work").exists()  # no rank was started
