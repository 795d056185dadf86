"""Fixtures for the pool tests, among them a real single-node Slurm (slurmctld + slurmd + munged).

Debian's slurm-wlm and munge are installed with apt-get when missing (the tests run as
root, as on CI). There is no systemd: the daemons are started directly with their state,
sockets, logs and pid files under one temporary folder, on free ports, and stopped at the
end of the session. The GRES are declared with AutoDetect=off and File= pointing at
character-device nodes made here (Slurm refuses plain files for the gpu GRES), so no
accelerator is needed.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

PACKAGES = ["slurmctld", "slurmd", "slurm-client", "munge"]
DAEMONS = {"slurmctld": "/usr/sbin/slurmctld", "slurmd": "/usr/sbin/slurmd", "munged": "/usr/sbin/munged"}


class SlurmUnavailable(RuntimeError):
    """Slurm could not be installed or started here; the message says why and what to do."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def ensure_installed() -> None:
    missing = [name for name, path in DAEMONS.items() if not Path(path).exists()] + (
        [] if shutil.which("sbatch") else ["sbatch"]
    )
    if not missing:
        return
    if os.geteuid() != 0:
        raise SlurmUnavailable(f"{', '.join(missing)} missing and not root: run `apt-get install {' '.join(PACKAGES)}` first")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *PACKAGES]
    done = subprocess.run(install, capture_output=True, text=True, env=env, check=False)
    if done.returncode:
        # A fresh machine has no package lists yet.
        subprocess.run(["apt-get", "update", "-q"], capture_output=True, text=True, env=env, check=False)
        done = subprocess.run(install, capture_output=True, text=True, env=env, check=False)
    if done.returncode:
        raise SlurmUnavailable(f"apt-get install {' '.join(PACKAGES)} failed: {done.stderr.strip()[-500:]}")


@dataclass
class SlurmCluster:
    root: Path
    host: str
    partitions: dict[str, str]  # partition -> GRES description, for the record
    env: dict[str, str] = field(default_factory=dict)
    pids: dict[str, int] = field(default_factory=dict)

    def run(self, *argv: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        done = subprocess.run(list(argv), capture_output=True, text=True, env=self.env, timeout=timeout, check=False)
        if check and done.returncode:
            raise AssertionError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")
        return done

    def runner(self, argv: list[str]) -> str:
        """A probe runner that talks to this cluster."""
        return self.run(*argv).stdout

    def log_tail(self) -> str:
        parts = []
        for name in ("slurmctld.log", "slurmd.log"):
            path = self.root / "log" / name
            if path.exists():
                parts.append(f"--- {name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-15:]))
        return "\n".join(parts)

    def stop(self) -> None:
        """SIGTERM slurmd, slurmctld, then munged (each waited for), SIGKILL for a straggler."""
        for name in ("slurmd", "slurmctld", "munged"):
            pid = self.pids.get(name)
            if pid is None or not _alive(pid):
                continue
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 2
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        finished, _ = os.waitpid(pid, os.WNOHANG)
        if finished:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _pid_from(path: Path, timeout: float = 15) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip().isdigit():
            return int(path.read_text().strip())
        time.sleep(0.05)
    raise SlurmUnavailable(f"{path.name} never appeared")


def start(root: Path, gres: list[tuple[str, str, int]], partitions: list[str]) -> SlurmCluster:
    """Start munged, slurmctld and slurmd with `gres` [(name, type, count)] and `partitions` on one node."""
    ensure_installed()
    host = socket.gethostname().split(".")[0]
    for sub in ("state", "spool", "log", "munge", "dev"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    os.chmod(root / "munge", 0o700)
    key = root / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    os.chmod(key, 0o400)
    munge_socket = root / "munge" / "munge.sock"
    cluster = SlurmCluster(root=root, host=host, partitions={p: "" for p in partitions})
    cluster.env = dict(os.environ, SLURM_CONF=str(root / "slurm.conf"))
    done = subprocess.run(
        [
            DAEMONS["munged"], "--force",
            f"--key-file={key}", f"--socket={munge_socket}",
            f"--pid-file={root / 'munge' / 'munged.pid'}", f"--log-file={root / 'munge' / 'munged.log'}",
            f"--seed-file={root / 'munge' / 'seed'}",
        ],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode:
        raise SlurmUnavailable(f"munged did not start: {done.stderr.strip()}")
    cluster.pids["munged"] = _pid_from(root / "munge" / "munged.pid")

    gres_lines = ["AutoDetect=off"]
    node_gres = []
    for name, gres_type, count in gres:
        for index in range(count):
            device = root / "dev" / f"{name}{index}"
            if not device.exists():
                os.mknod(device, 0o600 | 0o020000, os.makedev(1, 3))  # a character device, like /dev/null
        type_part = f" Type={gres_type}" if gres_type else ""
        gres_lines.append(f"NodeName={host} Name={name}{type_part} File={root / 'dev' / name}[0-{count - 1}]")
        node_gres.append(":".join(p for p in (name, gres_type, str(count)) if p))
    (root / "gres.conf").write_text("\n".join(gres_lines) + "\n")
    cpus = os.cpu_count() or 2
    conf = [
        "ClusterName=accelport-test",
        f"SlurmctldHost={host}",
        f"SlurmctldPort={_free_port()}",
        f"SlurmdPort={_free_port()}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={munge_socket}",
        f"StateSaveLocation={root / 'state'}",
        f"SlurmdSpoolDir={root / 'spool'}",
        f"SlurmctldPidFile={root / 'slurmctld.pid'}",
        f"SlurmdPidFile={root / 'slurmd.pid'}",
        f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}",
        f"SlurmdLogFile={root / 'log' / 'slurmd.log'}",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "MpiDefault=none",
        "ReturnToService=2",
        "SchedulerType=sched/backfill",
        "JobCompType=jobcomp/none",
        f"GresTypes={','.join(sorted({g[0] for g in gres}))}",
        f"NodeName={host} CPUs={cpus} Gres={','.join(node_gres)} State=UNKNOWN",
    ]
    conf += [f"PartitionName={p} Nodes={host} MaxTime=INFINITE State=UP" for p in partitions]
    (root / "slurm.conf").write_text("\n".join(conf) + "\n")
    try:
        for daemon in ("slurmctld", "slurmd"):
            argv = [DAEMONS[daemon], "-f", str(root / "slurm.conf")] + (["-i"] if daemon == "slurmctld" else [])
            done = subprocess.run(argv, capture_output=True, text=True, env=cluster.env, check=False, timeout=30)
            if done.returncode:
                raise SlurmUnavailable(f"{daemon} did not start: {done.stderr.strip()}\n{cluster.log_tail()}")
            cluster.pids[daemon] = _pid_from(root / f"{daemon}.pid")
        deadline = time.monotonic() + 120  # a hang guard: slurmd registers slowly on a loaded machine
        while time.monotonic() < deadline:
            state = cluster.run("sinfo", "--noheader", "--Node", "--format=%T", check=False).stdout.split()
            if state and all(s == "idle" for s in state):
                return cluster
            time.sleep(0.2)
        raise SlurmUnavailable(f"the node never became idle (sinfo: {state})\n{cluster.log_tail()}")
    except BaseException:
        cluster.stop()
        raise


# --------------------------------------------------------------------------- fixtures

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
GOLDEN = HERE / "golden"
EXAMPLES = HERE.parents[1] / "examples" / "pools"

# What the test node offers: two of each, as typed and untyped GRES, one partition per pool.
TEST_GRES = [("gpu", "h100", 2), ("npu", "910b", 2), ("mlu", "", 2)]
TEST_PARTITIONS = ["nvidia", "ascend", "amd", "mthreads", "cambricon"]


@pytest.fixture(scope="session")
def slurm(tmp_path_factory):
    """A running Slurm for the whole session; a machine where it cannot start fails the tests."""
    root = tmp_path_factory.mktemp("slurm")
    try:
        cluster = start(root, TEST_GRES, TEST_PARTITIONS)
    except (SlurmUnavailable, OSError, subprocess.SubprocessError) as exc:
        pytest.fail(f"cannot start a single-node Slurm for the integration tests: {exc}", pytrace=False)
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def golden_job():
    from accelport.pools.model import job_from_toml

    return job_from_toml(DATA / "golden-job.toml")


@pytest.fixture(scope="session")
def golden_pools():
    from accelport.pools.model import load_pools

    return {p.name: p for p in load_pools([DATA / "golden-pools.toml"])}
