"""Collective checks and bandwidth: all_reduce, all_gather, reduce_scatter, broadcast, all_to_all.

N local processes join one torch.distributed group on the current device's
default backend (gloo on CPU; nccl, hccl, mccl, cncl, xccl elsewhere). Every
result is checked element by element against the exact expected values
(inputs are small integers, so sums are exact in every dtype used). Time and
bandwidth follow nccl-tests (doc/PERFORMANCE.md): time is the mean per
iteration averaged over ranks; algbw = S / t with S the total bytes of the
operation (for all_gather and reduce_scatter, the full gathered/scattered
array); busbw = algbw x 2(n-1)/n for all_reduce, (n-1)/n for all_gather,
reduce_scatter and all_to_all, 1 for broadcast.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accelport.errors import InvalidValue, UserError
from accelport.verify.saved import check_fields, read_saved, rerun

RESULT_KIND = "accelport.comm"
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all")
DTYPES = {"float32": 4, "float16": 2, "bfloat16": 2, "int32": 4, "int64": 8, "float64": 8}
NCCL_TYPE_NAMES = {"float32": "float", "float16": "half", "bfloat16": "bfloat16", "int32": "int32", "int64": "int64", "float64": "double"}


def bus_factor(collective: str, ranks: int) -> float:
    """nccl-tests' bus-bandwidth correction factor."""
    if collective == "all_reduce":
        return 2 * (ranks - 1) / ranks
    if collective in ("all_gather", "reduce_scatter", "all_to_all"):
        return (ranks - 1) / ranks
    return 1.0


def sizes_between(min_bytes: int, max_bytes: int, factor: int) -> list[int]:
    if min_bytes <= 0 or max_bytes < min_bytes or factor < 2:
        raise UserError(f"sizes: need 0 < min ({min_bytes}) <= max ({max_bytes}) and factor >= 2 ({factor})")
    sizes, size = [], min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= factor
    return sizes


def parse_size(text: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    value = text.strip().lower().removesuffix("b")
    scale = units.get(value[-1:], 1)
    try:
        return int(float(value[:-1] if value[-1:] in units else value) * scale)
    except ValueError:
        raise UserError(f"size {text!r}: use bytes or K/M/G, e.g. 8, 64K, 16M") from None


@dataclass(frozen=True)
class CommRow:
    collective: str
    size: int  # bytes, S of nccl-tests
    count: int  # elements of S
    dtype: str
    redop: str
    root: int
    time_us: float
    algbw: float  # GB/s
    busbw: float
    wrong: int  # elements that differ from the expected result, summed over ranks

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class CommResult:
    ranks: int
    backend: str
    device: str
    rows: list[CommRow]
    errors: list[str] = field(default_factory=list)  # ranks that failed, hangs, unsupported collectives

    @property
    def wrong(self) -> int:
        return sum(r.wrong for r in self.rows)

    @property
    def passed(self) -> bool:
        return not self.errors and self.wrong == 0 and bool(self.rows)

    def avg_busbw(self) -> float:
        return sum(r.busbw for r in self.rows) / len(self.rows) if self.rows else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": RESULT_KIND,
            "version": 1,
            "verdict": "pass" if self.passed else "fail",
            "ranks": self.ranks,
            "backend": self.backend,
            "device": self.device,
            "wrong": self.wrong,
            "avg_busbw_gbps": self.avg_busbw(),
            "errors": self.errors,
            "rows": [r.to_dict() for r in self.rows],
        }


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run(
    ranks: int = 2,
    *,
    collectives: Sequence[str] = COLLECTIVES,
    sizes: Sequence[int] = (1 << 10, 1 << 16, 1 << 20),
    dtype: str = "float32",
    iters: int = 20,
    warmup: int = 5,
    backend: str | None = None,
    preload: Sequence[str] = (),
    timeout_s: float = 300.0,
    workdir: Path,
) -> CommResult:
    """Run the collectives across `ranks` local processes; returns rows in nccl-tests' layout."""
    if ranks < 2:
        raise InvalidValue("ranks", ranks, "collectives need at least 2 processes")
    unknown = [c for c in collectives if c not in COLLECTIVES]
    if unknown:
        raise UserError(f"unknown collective(s) {', '.join(unknown)}; choose from {', '.join(COLLECTIVES)}")
    if dtype not in DTYPES:
        raise UserError(f"dtype {dtype!r}: choose from {', '.join(DTYPES)}")
    workdir.mkdir(parents=True, exist_ok=True)
    config = {
        "collectives": list(collectives),
        "sizes": list(sizes),
        "dtype": dtype,
        "iters": iters,
        "warmup": warmup,
        "backend": backend,
        "preload": list(preload),
        "timeout_s": timeout_s,
        "out": str(workdir),
    }
    config_path = workdir / "comm-config.json"
    config_path.write_text(json.dumps(config), encoding="utf-8")
    port = _free_port()
    procs = []
    for rank in range(ranks):
        (workdir / f"rank{rank}.json").unlink(missing_ok=True)
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                   WORLD_SIZE=str(ranks), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(ranks))
        env.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
        log = (workdir / f"rank{rank}.log").open("w")
        procs.append((subprocess.Popen([sys.executable, "-m", "accelport.verify.stability.comm", str(config_path)],
                                       env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True), log))
    deadline = time.monotonic() + timeout_s
    errors: list[str] = []
    for rank, (proc, log) in enumerate(procs):
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            errors.append(f"rank {rank}: no result within {timeout_s:.0f} s (hang); see {workdir / f'rank{rank}.log'}")
        log.close()
    from accelport.verify.perf.bench import stop_process

    for proc, _ in procs:
        stop_process(proc, grace_s=2.0)
    reports = []
    for rank, (proc, _) in enumerate(procs):
        path = workdir / f"rank{rank}.json"
        if not path.exists():
            if proc.returncode not in (0, None) and not any(e.startswith(f"rank {rank}:") for e in errors):
                tail = (workdir / f"rank{rank}.log").read_text(errors="replace").strip().splitlines()[-3:]
                errors.append(f"rank {rank}: exited with code {proc.returncode}: {' | '.join(tail)}")
            continue
        reports.append(json.loads(path.read_text(encoding="utf-8")))
    backend_name = reports[0]["backend"] if reports else (backend or "?")
    device = reports[0]["device"] if reports else "?"
    for report in reports:
        errors.extend(f"rank {report['rank']}: {e}" for e in report.get("errors", []))
    rows = _aggregate(reports, ranks) if len(reports) == ranks else []
    if reports and len(reports) != ranks:
        errors.append(f"only {len(reports)} of {ranks} ranks reported")
    return CommResult(ranks=ranks, backend=backend_name, device=device, rows=rows, errors=errors)


def _aggregate(reports: list[dict[str, Any]], ranks: int) -> list[CommRow]:
    rows = []
    for index, first in enumerate(reports[0]["rows"]):
        times = [r["rows"][index]["seconds"] for r in reports]
        seconds = sum(times) / len(times)
        wrong = sum(r["rows"][index]["wrong"] for r in reports)
        algbw = first["size"] / 1e9 / seconds if seconds > 0 else 0.0
        rows.append(
            CommRow(
                collective=first["collective"],
                size=first["size"],
                count=first["count"],
                dtype=first["dtype"],
                redop=first["redop"],
                root=first["root"],
                time_us=seconds * 1e6,
                algbw=algbw,
                busbw=algbw * bus_factor(first["collective"], ranks),
                wrong=wrong,
            )
        )
    return rows


_SAVED_FIELDS = {"verdict": "str", "ranks": "int", "backend": "str", "device": "str", "wrong": "int",
                 "avg_busbw_gbps": "number", "errors": "strs", "rows": "list"}
_SAVED_ROW = {"collective": "str", "size": "int", "time_us": "number", "algbw": "number", "busbw": "number", "wrong": "int"}


def load_result(path: str | Path) -> dict[str, Any]:
    """A result saved by `accelport comm --save`, checked field by field (UserError naming the file and key)."""
    data = read_saved(path, "comm", RESULT_KIND)
    check_fields(data, _SAVED_FIELDS, path, "comm")
    if data["verdict"] not in ("pass", "fail"):
        raise UserError(f"{path}: comm result: 'verdict' must be \"pass\" or \"fail\"; {rerun('comm')}")
    for index, row in enumerate(data["rows"]):
        if not isinstance(row, dict):
            raise UserError(f"{path}: comm result: 'rows[{index}]' must be an object; {rerun('comm')}")
        check_fields(row, _SAVED_ROW, path, "comm", where=f"rows[{index}].")
        if row["size"] <= 0:
            raise UserError(f"{path}: comm result: 'rows[{index}].size' must be positive (got {row['size']}); {rerun('comm')}")
    return data


def render_table(result: CommResult) -> str:
    """The nccl-tests table: one block per collective, then the summary lines."""
    lines = [f"# accelport comm: {result.ranks} ranks, backend {result.backend}, device {result.device}", "#"]
    header = f"#{'size':>11s} {'count':>13s} {'type':>9s} {'redop':>7s} {'root':>7s} {'time':>8s} {'algbw':>7s} {'busbw':>7s} {'#wrong':>6s}"
    units = f"#{'(B)':>11s} {'(elements)':>13s} {'':>9s} {'':>7s} {'':>7s} {'(us)':>8s} {'(GB/s)':>7s} {'(GB/s)':>7s} {'':>6s}"
    current = None
    for row in result.rows:
        if row.collective != current:
            current = row.collective
            lines += [f"# {current}", header, units]
        lines.append(
            f"{row.size:12d} {row.count:13d} {NCCL_TYPE_NAMES.get(row.dtype, row.dtype):>9s} {row.redop:>7s} {row.root:7d} "
            f"{row.time_us:8.1f} {row.algbw:7.2f} {row.busbw:7.2f} {row.wrong:6d}"
        )
    lines.append(f"# Out of bounds values : {result.wrong} {'OK' if result.wrong == 0 else 'FAILED'}")
    lines.append(f"# Avg bus bandwidth    : {result.avg_busbw():.4g}")
    for error in result.errors:
        lines.append(f"# ERROR: {error}")
    lines.append(f"# verdict: {'pass' if result.passed else 'fail'}")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- worker (one rank)


def _pattern(torch, count: int, rank: int, dtype, device):
    # Small integers: exact in fp16/bf16 sums for up to 16 ranks.
    index = torch.arange(count, device=device, dtype=torch.int64)
    return ((index + 3 * rank) % 7 + 1).to(dtype)


def _one(torch, dist, collective: str, size: int, ranks: int, rank: int, dtype, elem: int, device):
    """Build (run, check) for one collective and size; check() returns the number of wrong elements."""
    count = max(ranks, size // elem // ranks * ranks)
    per_rank = count // ranks
    if collective == "all_reduce":
        data = _pattern(torch, count, rank, dtype, device)
        expected = sum(_pattern(torch, count, r, torch.float64, device) for r in range(ranks)).to(dtype)
        work = data.clone()

        def run():
            dist.all_reduce(work)

        def check():
            out = data.clone()
            dist.all_reduce(out)
            return int((out != expected).sum())

        return count, "sum", -1, run, check
    if collective == "all_gather":
        data = _pattern(torch, per_rank, rank, dtype, device)
        out = torch.empty(count, dtype=dtype, device=device)
        expected = torch.cat([_pattern(torch, per_rank, r, dtype, device) for r in range(ranks)])

        def run():
            dist.all_gather_into_tensor(out, data)

        def check():
            out.zero_()
            dist.all_gather_into_tensor(out, data)
            return int((out != expected).sum())

        return count, "none", -1, run, check
    if collective == "reduce_scatter":
        data = _pattern(torch, count, rank, dtype, device)
        out = torch.empty(per_rank, dtype=dtype, device=device)
        total = sum(_pattern(torch, count, r, torch.float64, device) for r in range(ranks)).to(dtype)
        expected = total[rank * per_rank : (rank + 1) * per_rank]

        def run():
            dist.reduce_scatter_tensor(out, data)

        def check():
            out.zero_()
            dist.reduce_scatter_tensor(out, data)
            return int((out != expected).sum())

        return count, "sum", -1, run, check
    if collective == "broadcast":
        root = 0
        expected = _pattern(torch, count, root, dtype, device)
        work = expected.clone() if rank == root else torch.zeros(count, dtype=dtype, device=device)

        def run():
            dist.broadcast(work, root)

        def check():
            out = expected.clone() if rank == root else torch.zeros(count, dtype=dtype, device=device)
            dist.broadcast(out, root)
            return int((out != expected).sum())

        return count, "none", root, run, check
    # all_to_all: rank r's block j goes to rank j's block r.
    data = _pattern(torch, count, rank, dtype, device) + rank * 10
    out = torch.empty(count, dtype=dtype, device=device)
    expected = torch.cat(
        [(_pattern(torch, count, r, dtype, device) + r * 10)[rank * per_rank : (rank + 1) * per_rank] for r in range(ranks)]
    )

    def run():
        dist.all_to_all_single(out, data)

    def check():
        out.zero_()
        dist.all_to_all_single(out, data)
        return int((out != expected).sum())

    return count, "none", -1, run, check


def _worker(config_path: str) -> int:
    config = json.loads(Path(config_path).read_text(encoding="utf-8"))
    for module in config["preload"]:  # vendor adapters (torch_npu, ...) or site setup
        importlib.import_module(module)
    import datetime

    import torch
    import torch.distributed as dist

    rank, ranks = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    current = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
    device_type = current.type if current is not None else "cpu"
    device = torch.device(device_type, local) if device_type != "cpu" else torch.device("cpu")
    if device_type != "cpu":
        torch.accelerator.set_device_index(local)
    backend = config["backend"] or dist.get_default_backend_for_device(device_type)
    dist.init_process_group(backend, rank=rank, world_size=ranks,
                            timeout=datetime.timedelta(seconds=config["timeout_s"]))
    dtype = getattr(torch, config["dtype"])
    elem = DTYPES[config["dtype"]]
    rows, errors = [], []

    def sync():
        if device_type != "cpu":
            torch.accelerator.synchronize()

    for collective in config["collectives"]:
        for size in config["sizes"]:
            try:
                count, redop, root, op, check = _one(torch, dist, collective, size, ranks, rank, dtype, elem, device)
                for _ in range(config["warmup"]):
                    op()
                sync()
                dist.barrier()
                started = time.perf_counter()
                for _ in range(config["iters"]):
                    op()
                sync()
                seconds = (time.perf_counter() - started) / config["iters"]
                wrong = check()
                sync()
            except (RuntimeError, NotImplementedError, ValueError) as exc:
                errors.append(f"{collective} {size} B: {str(exc).splitlines()[0][:200]}")
                continue
            rows.append({"collective": collective, "size": count * elem, "count": count, "dtype": config["dtype"],
                         "redop": redop, "root": root, "seconds": seconds, "wrong": wrong})
    dist.destroy_process_group()
    report = {"rank": rank, "backend": backend, "device": str(device), "rows": rows, "errors": errors}
    from accelport.fileio import atomic_write_text

    atomic_write_text(Path(config["out"]) / f"rank{rank}.json", json.dumps(report))
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="one rank of `accelport comm` (started by accelport)")
    parser.add_argument("config")
    sys.exit(_worker(parser.parse_args().config))
