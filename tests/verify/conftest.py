"""Fixtures for the verify tests: a clock the test moves by hand, for planted step times."""

from __future__ import annotations

import pytest


class PlantedClock:
    """Seconds that pass only when the test says so: planted step times are exact whatever the machine's load."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def planted_clock() -> PlantedClock:
    return PlantedClock()
