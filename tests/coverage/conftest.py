"""Fixtures for the coverage tests: traces of the small models in coverage_models.py, made once."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
MODELS = HERE / "coverage_models.py"
EXAMPLE = REPO / "examples" / "legacy_cuda_app" / "coverage_case.py"


def spec(name: str) -> str:
    return f"{MODELS}:{name}"


@pytest.fixture(scope="session")
def model_spec():
    """MODULE:FACTORY for a model in coverage_models.py, by factory name."""
    return spec


@pytest.fixture(scope="session")
def models_file() -> Path:
    return MODELS


@pytest.fixture(scope="session")
def example_case() -> Path:
    """The example app's factory file for `accelport ops`."""
    return EXAMPLE


@pytest.fixture(scope="session")
def lm_meta():
    from accelport.coverage import trace

    return trace(spec("tiny_lm"), strategy="meta")


@pytest.fixture(scope="session")
def lm_cpu():
    from accelport.coverage import trace

    return trace(spec("tiny_lm"), strategy="cpu")


@pytest.fixture(scope="session")
def encoder_trace():
    from accelport.coverage import trace

    return trace(spec("encoder_eval"))


@pytest.fixture
def subprocess_env():
    """Environment for a child Python that imports accelport from this checkout."""
    env = dict(os.environ)
    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "src"), env.get("PYTHONPATH")]))
    return env
