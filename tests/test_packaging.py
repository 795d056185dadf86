"""The wheel is what users install: it must carry the licence and the demo's example."""

from __future__ import annotations

import email
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(ROOT)],
        check=True, capture_output=True, text=True,
    )
    (path,) = out.glob("accelport-*.whl")
    return path


def test_wheel_carries_licence_and_metadata(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        licence = [n for n in names if n.endswith("dist-info/licenses/LICENSE")]
        assert licence, names
        assert b"Apache License" in archive.read(licence[0])
        (meta_name,) = [n for n in names if n.endswith("dist-info/METADATA")]
        meta = email.message_from_bytes(archive.read(meta_name))
    assert meta["License-Expression"] == "Apache-2.0"
    assert "Environment :: Console" in meta.get_all("Classifier")
    extras = set(meta.get_all("Provides-Extra"))
    assert {"torch", "profile", "plots", "kernels", "pools", "all"} <= extras
    by_extra: dict[str, set[str]] = {}
    for requirement in meta.get_all("Requires-Dist"):
        name, _, marker = requirement.partition(";")
        if "extra ==" in marker:
            extra = marker.split("extra ==")[1].strip().strip("'\"")
            by_extra.setdefault(extra, set()).add(name.split(">")[0].split("=")[0].strip())
    # Each extra holds what its commands use: matplotlib for plots, msgspec for traces, not `torch`.
    assert by_extra["torch"] == {"torch", "numpy"}
    assert "msgspec" in by_extra["profile"]
    assert by_extra["plots"] == {"matplotlib"}
    assert "torch" not in by_extra["profile"] | by_extra["plots"]


def test_installed_wheel_finds_its_demo_example(wheel: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    elsewhere = tmp_path / "elsewhere"  # no examples/ here, and the checkout is not on the path
    elsewhere.mkdir()
    probe = "from accelport.cli.demo import find_examples; print(find_examples(None))"
    done = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(site)!r}); {probe}"],
        cwd=elsewhere, capture_output=True, text=True, check=True,
    )
    found = Path(done.stdout.strip())
    assert found == site / "accelport" / "_examples"
    assert (found / "legacy_cuda_app" / "train.py").read_bytes() == (ROOT / "examples/legacy_cuda_app/train.py").read_bytes()
    assert (found / "pools" / "job.toml").is_file()
