"""`accelport curves`: reading CSV, JSONL and TensorBoard logs; gaps; verdicts; plots."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from accelport.errors import UserError
from accelport.verify.numerics.curves import compare_curves, read_run

TB = Path(__file__).parent / "data" / "tb"


def loss(step: int, scale: float = 1.0, seed_shift: float = 0.0) -> float:
    return (4.0 * math.exp(-step / 8) + 0.5) * scale + seed_shift


def write_csv(path: Path, scale: float = 1.0, steps: int = 20, shift: float = 0.0) -> Path:
    rows = ["step,loss,grad_norm"] + [
        f"{s},{loss(s, scale, shift)},{1 / (1 + s)}" for s in range(steps)
    ]
    path.write_text("\n".join(rows) + "\n")
    return path


def write_jsonl(path: Path, scale: float = 1.0) -> Path:
    path.write_text(
        "".join(
            json.dumps({"step": s, "loss": loss(s, scale), "lr": 1e-3}) + "\n" for s in range(20)
        )
    )
    return path


def test_tensorboard_file_written_by_tensorboard_is_read():
    run = read_run(TB)
    assert sorted(run.series) == ["train/grad_norm", "train/loss"]
    assert run.series["train/loss"][0] == pytest.approx(4.5)
    assert run.series["train/loss"][19] == pytest.approx(loss(19), rel=1e-6)  # float32 in the file
    assert run.series["train/grad_norm"][3] == pytest.approx(0.25)  # TF2 tensor summary


def test_all_three_formats_align_by_step(tmp_path):
    result = compare_curves(TB, [write_csv(tmp_path / "a.csv"), write_jsonl(tmp_path / "b.jsonl")])
    data = result.to_dict()
    assert data["verdict"] == "pass"
    assert data["final_gap"] < 1e-6 and data["mean_gap"] < 1e-6
    assert [m["metric"] for m in data["metrics"]] == ["loss"]  # the JSONL log has no grad norm
    both = compare_curves(TB, [write_csv(tmp_path / "a.csv")]).to_dict()
    assert [m["metric"] for m in both["metrics"]] == ["loss", "grad_norm"]
    assert both["metrics"][1]["judged"] is False  # grad norm is reported, the loss decides


def test_one_percent_rule(tmp_path):
    ref = write_csv(tmp_path / "ref.csv")
    close = write_csv(tmp_path / "close.csv", scale=1.008)
    far = write_csv(tmp_path / "far.csv", scale=1.015)
    result = compare_curves(ref, [close, far])
    loss_result = result.metrics[0]
    assert loss_result.final_gap["close.csv"] == pytest.approx(0.008, rel=1e-6)
    assert loss_result.final_gap["far.csv"] == pytest.approx(0.015, rel=1e-6)
    assert not result.passed and any("far.csv" in r for r in loss_result.reasons)
    per_step = result.to_dict()["metrics"][0]["per_step"]
    assert per_step["step"] == list(range(20))
    assert per_step["relative_gap"]["far.csv"][3] == pytest.approx(0.015, rel=1e-6)
    assert compare_curves(ref, [close]).passed
    assert compare_curves(ref, [far], tolerance=0.02).passed


def test_noise_band_of_reference_seeds(tmp_path):
    ref = write_csv(tmp_path / "ref.csv")
    seeds = [
        write_csv(tmp_path / "s1.csv", shift=0.05),
        write_csv(tmp_path / "s2.csv", shift=-0.05),
    ]
    inside = write_csv(tmp_path / "inside.csv", shift=0.04)  # 4-8% off, but seeds differ as much
    outside = write_csv(tmp_path / "outside.csv", shift=0.2)
    assert not compare_curves(ref, [inside]).passed
    assert compare_curves(ref, [inside], seeds=seeds).passed
    banded = compare_curves(ref, [outside], seeds=seeds)
    assert not banded.passed and banded.metrics[0].outside["outside.csv"] == 1.0


def test_appended_logs_keep_the_last_value_of_a_step(tmp_path):
    log = tmp_path / "appended.csv"
    write_csv(log, scale=2.0, steps=5)
    with log.open("a") as handle:  # a second run appended, as train.py --log does
        handle.write(
            "step,loss,grad_norm\n" + "".join(f"{s},{loss(s)},{1 / (1 + s)}\n" for s in range(5))
        )
    result = compare_curves(write_csv(tmp_path / "ref.csv", steps=5), [log])
    assert result.passed
    assert list(result.options["duplicate_steps_kept_last"].values()) == [5]


def test_bad_inputs_name_the_file(tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(UserError, match=r"empty\.csv: empty log"):
        read_run(empty)
    nostep = tmp_path / "nostep.csv"
    nostep.write_text("epoch,loss\n0,1\n")
    with pytest.raises(UserError, match="no step column"):
        read_run(nostep)
    with pytest.raises(UserError, match="no metric 'perplexity'"):
        compare_curves(
            write_csv(tmp_path / "r.csv"), [write_csv(tmp_path / "t.csv")], metrics=["perplexity"]
        )


def test_cli_outputs_and_png(cli, tmp_path):
    ref, far = write_csv(tmp_path / "ref.csv"), write_csv(tmp_path / "far.csv", scale=1.05)
    result = cli("curves", ref, far, "--format", "json")
    assert result.code == 1 and json.loads(result.out)["verdict"] == "fail"
    html = tmp_path / "curves.html"
    png = tmp_path / "curves.png"
    assert cli("curves", ref, ref, "--format", "html", "-o", html, "--png", png).code == 0
    assert "<svg" in html.read_text() and "polyline" in html.read_text()
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert cli("curves", ref, tmp_path / "missing.csv").code == 2
    assert cli("curves", ref, far, "--tolerance", "grad_norm=x").code == 2


def test_a_truncated_test_run_fails_and_says_where_it_stops(cli, tmp_path):
    ref = write_csv(tmp_path / "ref.csv", steps=20)
    short = write_csv(tmp_path / "short.csv", steps=12)  # same values, but it stopped at step 11
    result = compare_curves(ref, [short])
    assert not result.passed
    assert "TEST short.csv: loss ends at step 11, REF's at step 19" in " ".join(result.metrics[0].reasons)
    out = cli("curves", ref, short, "--format", "json")
    assert out.code == 1 and "ends at step 11" in out.out
    # A TEST that runs longer than REF is judged on REF's steps and passes.
    assert compare_curves(short, [ref]).passed
    # A reference seed that stops early shrinks the band's steps: said too.
    assert not compare_curves(ref, [ref], seeds=[short]).passed


@pytest.mark.parametrize("bad", ["nan", "inf"])
def test_a_reference_with_nan_fails_with_the_step(tmp_path, bad):
    ref = write_csv(tmp_path / "ref.csv")
    lines = ref.read_text().splitlines()
    lines[8] = f"7,{bad},0.1"
    broken = tmp_path / "broken.csv"
    broken.write_text("\n".join(lines) + "\n")
    result = compare_curves(broken, [ref])
    assert not result.passed
    assert f"REF broken.csv: loss is {bad} at step 7" in result.metrics[0].reasons[0]


@pytest.mark.parametrize(("step", "shown"), [('"x"', '"x"'), ("1.5", "1.5"), ("null", "null"), ("true", "true")])
def test_a_jsonl_step_that_is_not_a_whole_number_is_one_line_exit_2(cli, tmp_path, step, shown):
    ref = write_csv(tmp_path / "ref.csv")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"step": 0, "loss": 1}\n{"step": ' + step + ', "loss": 0.9}\n')
    result = cli("curves", ref, bad)
    assert result.code == 2 and len(result.err.strip().splitlines()) == 1
    assert f"bad.jsonl:2: step {shown} is not a whole number" in result.err
    listed = tmp_path / "list.jsonl"
    listed.write_text('{"step": 0, "loss": 1}\n[1, 2]\n')
    assert "list.jsonl:2: not a JSON object" in cli("curves", ref, listed).err


def test_a_png_path_that_cannot_be_written_is_one_line_exit_2(cli, tmp_path):
    ref = write_csv(tmp_path / "ref.csv")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    inside = cli("curves", ref, ref, "--png", blocker / "curves.png")
    assert inside.code == 2 and len(inside.err.strip().splitlines()) == 1 and "Traceback" not in inside.err
    assert "curves.png: cannot write the PNG (a part of the path is a file, not a folder)" in inside.err
    folder = cli("curves", ref, ref, "--png", tmp_path)
    assert folder.code == 2 and "cannot write the PNG (is a directory)" in folder.err
    assert folder.err.rstrip().endswith("choose another path for it (--png)")


def _records(data: bytes) -> list[tuple[int, int]]:
    """(payload start, payload length) of each TFRecord, parsed here independently of the reader."""
    import struct

    spans, pos = [], 0
    while pos + 12 <= len(data):
        (length,) = struct.unpack("<Q", data[pos : pos + 8])
        spans.append((pos + 12, length))
        pos += 12 + length + 4
    return spans


@pytest.mark.parametrize("where", ["payload", "payload_crc"])
def test_a_flipped_byte_in_a_tensorboard_record_is_reported_exit_2(cli, tmp_path, where):
    source = next(TB.glob("events.out.tfevents.*"))
    data = bytearray(source.read_bytes())
    start, length = _records(bytes(data))[3]  # a scalar record in the middle of the file
    index = start + length // 2 if where == "payload" else start + length + 1
    data[index] ^= 0x10
    broken = tmp_path / "run" / source.name
    broken.parent.mkdir()
    broken.write_bytes(bytes(data))
    with pytest.raises(UserError, match=rf"{broken.name}: TensorBoard record at byte {start - 12} fails its CRC check"):
        list(read_run(broken).series)
    result = cli("curves", TB, broken.parent)
    assert result.code == 2 and len(result.err.strip().splitlines()) == 1
    assert str(broken) in result.err and "CRC" in result.err
    assert cli("curves", TB, TB).code == 0  # the undamaged file still reads


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--tolerance", "-0.01"), "--tolerance -0.01: the allowed relative gap must be a fraction above 0"),
        (("--tolerance", "0"), "--tolerance 0.0: the allowed relative gap must be a fraction above 0"),
        (("--tolerance", "loss=nan"), "--tolerance loss=nan: the allowed relative gap"),
        (("--max-outside", "1.5"), "--max-outside 1.5: give the share of steps as a fraction in [0, 1]"),
        (("--max-outside", "-0.1"), "--max-outside -0.1"),
        (("--smooth", "1"), "--smooth 1.0: the EMA weight must be in [0, 1)"),
        (("--smooth", "nan"), "--smooth nan"),
    ],
)
def test_bad_numeric_options_are_one_line_exit_2(cli, tmp_path, args, message):
    ref = write_csv(tmp_path / "ref.csv")
    result = cli("curves", ref, ref, *args)
    assert result.code == 2 and len(result.err.strip().splitlines()) == 1
    assert message in result.err, result.err


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"smooth": 1.0}, "smooth=1.0: the EMA weight"),
        ({"max_outside": 1.5}, "max_outside=1.5: give the share"),
        ({"tolerance": 0.0}, "tolerance=0.0: the allowed relative gap"),
        ({"tolerances": {"loss": float("nan")}}, "tolerances=loss=nan: the allowed relative gap"),
    ],
)
def test_bad_numeric_options_in_code_name_the_parameter_not_a_flag(tmp_path, options, message):
    ref = write_csv(tmp_path / "ref.csv")
    with pytest.raises(UserError) as caught:
        compare_curves(ref, [ref], **options)
    assert str(caught.value).startswith(message) and "--" not in str(caught.value)
