"""Operator coverage: which ATen operators a model runs, and which a target backend lacks.

    from accelport.coverage import trace, check
    report = check(trace("examples/legacy_cuda_app/coverage_case.py:factory"), ["npu", "musa"])

`trace` records one training or inference step (meta device first, then FakeTensorMode, then a
real CPU run); `check` judges it against per-backend operator lists; `check_on_device` asks the
live dispatcher on the machine that has the backend. Importing this package does not import torch.
"""

from __future__ import annotations

from accelport.coverage.check import CoverageReport, OpVerdict, Status, TargetResult, check
from accelport.coverage.ondevice import check_on_device
from accelport.coverage.oplists import (
    OpList,
    aten_facts,
    default_targets,
    known_oplists,
    oplist_for,
)
from accelport.coverage.records import OpRecord, Site, Trace
from accelport.coverage.tracer import trace
from accelport.coverage.workload import Workload

__all__ = [
    "CoverageReport",
    "OpList",
    "OpRecord",
    "OpVerdict",
    "Site",
    "Status",
    "TargetResult",
    "Trace",
    "Workload",
    "aten_facts",
    "check",
    "check_on_device",
    "default_targets",
    "known_oplists",
    "oplist_for",
    "trace",
]
