"""The route roll-up counts kernels, library uses and semantic hazards: checked on hand-built findings."""

from __future__ import annotations

from accelport.findings import Location, Route
from accelport.inventory.base import make_finding
from accelport.inventory.route import decide, estimate, roll_up, summarise


def finding(rule_id: str, symbol: str, path: str = "k.cu", line: int = 1, **kwargs):
    return make_finding(rule_id, symbol=symbol, location=Location(path, line, 1, line, 2), **kwargs)


# Counted by hand: 2 kernels (one with a portable operator), 4 library uses in 2 libraries
# (the two header includes are not uses), 3 hazards (one of them route A, in Python).
FINDINGS = [
    finding("AP4010", "cublas_v2.h", line=1),
    finding("AP4010", "nccl.h", line=2),
    finding("AP5001", "my_softmax", line=3, replacement="accelport.kernels softmax"),
    finding("AP5001", "scatter_kernel", line=10),
    finding("AP5003", "scatter_kernel", line=20),
    finding("AP5005", "__shfl_down_sync", line=4),
    finding("AP9101", "__shfl_down_sync", line=4),
    finding("AP9102", "threadIdx.x & 31", line=5),
    finding("AP4101", "cublasHandle_t", line=21),
    finding("AP4101", "cublasSgemm", line=22),
    finding("AP4109", "ncclAllReduce", line=23),
    finding("AP4109", "ncclFloat", line=23),
    finding("AP2001", "cudaMalloc", line=24),
    finding("AP9002", "cuda-or-cpu", path="train.py", line=2),
    finding("AP1101", "torch.cuda.is_available", path="train.py", line=2),
]


def test_roll_up_counts_match_the_hand_count():
    assert roll_up(FINDINGS) == {
        "kernels": 2,
        "kernels_covered": 1,
        "library_uses": 4,
        "library_families": 2,
        "hazards": 3,
    }


def test_project_reason_states_the_counts():
    decision = decide(FINDINGS, estimate(FINDINGS))
    assert decision.route is Route.B
    assert (
        "2 hand-written CUDA kernel(s), 1 with a portable accelport operator; "
        "4 CUDA library call/type use(s) in 2 libraries; 3 semantic hazard(s) to review"
    ) in decision.reasons


def test_library_calls_and_hazards_are_counted_without_any_kernel():
    items = [
        finding("AP4010", "cublas_v2.h"),
        finding("AP4101", "cublasSgemm", line=3),
        finding("AP9107", "cudaMallocManaged", line=4),
    ]
    reasons = decide(items, estimate(items)).reasons
    assert (
        "0 hand-written CUDA kernel(s), 0 with a portable accelport operator; "
        "1 CUDA library call/type use(s) in 1 library; 1 semantic hazard(s) to review"
    ) in reasons


def test_per_file_counts_stay_within_their_file():
    _route, _effort, files = summarise(FINDINGS)
    by_path = {f.path: f for f in files}
    assert "3 semantic hazard(s)" not in " ".join(by_path["k.cu"].route.reasons)
    assert any("; 2 semantic hazard(s) to review" in r for r in by_path["k.cu"].route.reasons)
    python = by_path["train.py"]
    assert python.route.route is Route.A
    assert "1 semantic hazard(s) to review" in python.route.reasons


def test_no_counts_line_for_framework_only_code():
    items = [finding("AP1101", "torch.cuda.is_available", path="train.py")]
    assert not any("hazard" in r or "kernel(s)" in r for r in decide(items, estimate(items)).reasons)
