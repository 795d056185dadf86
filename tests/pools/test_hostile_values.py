"""Hostile values in every job and pool field: refused where no quoting can make them safe, quoted where it can.

The rendered batch script is run by bash with stand-ins for srun, scontrol and torchrun
on PATH: whatever the values, the command that reaches torchrun is the job's own, word
for word, and no injected line runs.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from accelport.errors import UserError
from accelport.pools.model import job_from_toml, pools_from_toml
from accelport.pools.render import render_for_pool
from accelport.pools.slurm import DirectiveError, directive_arguments
from accelport.pools.validate import sbatch_problems

# Quotes of both kinds, command substitution, backticks, separators, a comment, globs,
# redirections and a backslash: a value quoted wrongly anywhere runs one of the touches.
PAYLOAD = "a b'c\"d$(touch PWNED1)`touch PWNED2`;touch PWNED3 #e&|>x<y*?~{} \\ !$HOME"
CONTROL = ["x\ntouch PWNED", "x\rtouch PWNED", "x\x1b[2Jy", "x\x00y", "x\ty", "x\x85y", "x\x7fy"]


def _set(target: str, value: str):
    """A setter for one field; `target` is the field path the error must name."""

    def job_field(name):
        return lambda job, pool: (replace(job, **{name: value}), pool)

    def slurm_field(name):
        return lambda job, pool: (job, replace(pool, slurm=replace(pool.slurm, **{name: value})))

    def kube_field(name):
        return lambda job, pool: (job, replace(pool, kubernetes=replace(pool.kubernetes, **{name: value})))

    def vendor_field(name, wrap=lambda v: v):
        return lambda job, pool: (job, replace(pool, vendor=replace(pool.vendor, **{name: wrap(value)})))

    setters = {
        "job.name": job_field("name"),
        "job.command[0]": lambda job, pool: (replace(job, command=(value, *job.command[1:])), pool),
        "job.command[2]": lambda job, pool: (replace(job, command=(*job.command[:2], value)), pool),
        "job.env.HOSTILE": lambda job, pool: (replace(job, env={"HOSTILE": value}), pool),
        "job.env key": lambda job, pool: (replace(job, env={value: "1"}), pool),
        "job.workdir": job_field("workdir"),
        "job.memory": job_field("memory"),
        "job.time_limit": job_field("time_limit"),
        "job.job_id": job_field("job_id"),
        "job.images.npu": lambda job, pool: (replace(job, images={**job.images, "npu": value}), pool),
        "pool.ascend.slurm.partition": slurm_field("partition"),
        "pool.ascend.slurm.account": slurm_field("account"),
        "pool.ascend.slurm.qos": slurm_field("qos"),
        "pool.ascend.slurm.constraint": slurm_field("constraint"),
        "pool.ascend.slurm.gres": slurm_field("gres"),
        "pool.ascend.slurm.gres_type": slurm_field("gres_type"),
        "pool.ascend.kubernetes.queue": kube_field("queue"),
        "pool.ascend.kubernetes.image": kube_field("image"),
        "pool.ascend.kubernetes.scheduler_name": kube_field("scheduler_name"),
        "pool.ascend.kubernetes.node_selector.accelerator": lambda job, pool: (
            job, replace(pool, kubernetes=replace(pool.kubernetes, node_selector={"accelerator": value}))
        ),
        "pool.name": lambda job, pool: (job, replace(pool, name=value)),
        "pool.ascend.kubernetes.namespace": kube_field("namespace"),
        "pool.ascend.kubernetes.resource": kube_field("resource"),
        "pool.ascend.kubernetes.tolerations[0].value": lambda job, pool: (
            job, replace(pool, kubernetes=replace(pool.kubernetes, tolerations=({"key": "k", "value": value},)))
        ),
        "pool.ascend.vendor.name": vendor_field("name"),
        "pool.ascend.vendor.torch_device": vendor_field("torch_device"),
        "pool.ascend.vendor.distributed_backend": vendor_field("distributed_backend"),
        "pool.ascend.vendor.visible_devices[0]": vendor_field("visible_devices", lambda v: (v,)),
    }
    return setters[target]


FIELDS = [
    "job.name", "job.command[0]", "job.command[2]", "job.env.HOSTILE", "job.env key", "job.workdir", "job.memory",
    "job.time_limit", "job.job_id", "job.images.npu", "pool.ascend.slurm.partition", "pool.ascend.slurm.account",
    "pool.ascend.slurm.qos", "pool.ascend.slurm.constraint", "pool.ascend.slurm.gres", "pool.ascend.slurm.gres_type",
    "pool.ascend.kubernetes.queue", "pool.ascend.kubernetes.image", "pool.ascend.kubernetes.scheduler_name",
    "pool.ascend.kubernetes.node_selector.accelerator", "pool.ascend.kubernetes.namespace", "pool.ascend.kubernetes.resource",
    "pool.ascend.kubernetes.tolerations[0].value", "pool.ascend.vendor.name", "pool.ascend.vendor.torch_device",
    "pool.ascend.vendor.distributed_backend", "pool.ascend.vendor.visible_devices[0]",
]


@pytest.fixture
def ascend(golden_pools):
    return golden_pools["ascend"].on("slurm")


@pytest.mark.parametrize("control", CONTROL, ids=repr)
@pytest.mark.parametrize("target", FIELDS)
@pytest.mark.parametrize("engine", ["slurm", "kubernetes"])
def test_a_control_character_in_any_field_is_refused_naming_the_field(golden_job, ascend, target, control, engine):
    job, pool = _set(target, control)(golden_job, ascend)
    with pytest.raises(UserError) as refused:
        render_for_pool(job, pool.on(engine))
    message = str(refused.value)
    assert target in message, message
    assert "\n" not in message and "\r" not in message and "\x1b" not in message  # the error itself is one safe line


@pytest.mark.parametrize("engine", ["slurm", "kubernetes"])
def test_a_control_character_in_the_pool_name_is_refused_in_one_line(golden_job, ascend, engine):
    job, pool = _set("pool.name", "ascend\ntouch PWNED")(golden_job, ascend)
    with pytest.raises(UserError) as refused:
        render_for_pool(job, pool.on(engine))
    assert "pool.ascend\\ntouch PWNED.name 'ascend\\ntouch PWNED' contains a newline" in str(refused.value)
    assert "\n" not in str(refused.value)


def test_control_characters_in_the_toml_files_are_refused_when_read(tmp_path):
    job = tmp_path / "job.toml"
    job.write_text('[job]\nname = "ft"\ncommand = ["train.py"]\nworkdir = "/data\\nid > /tmp/pwned"\n')
    with pytest.raises(UserError, match=r"job\.toml: job\.workdir '/data\\nid > /tmp/pwned' contains a newline"):
        job_from_toml(job)
    pools = tmp_path / "pools.toml"
    pools.write_text('[[pool]]\nname = "p"\nvendor = "npu"\nengine = "slurm"\n[pool.slurm]\npartition = "ascend\\r"\n')
    with pytest.raises(UserError, match=r"pools\.toml: pool\.p\.slurm\.partition 'ascend\\r' contains a carriage return"):
        pools_from_toml(pools)


@pytest.mark.parametrize(
    ("target", "says"),
    [
        ("pool.ascend.slurm.gres", "a Slurm GRES name or type"),
        ("pool.ascend.slurm.gres_type", "a Slurm GRES name or type"),
        ("job.env key", "not a valid environment variable name"),
        ("pool.ascend.vendor.visible_devices[0]", "is not a valid name"),
    ],
)
def test_names_that_go_into_shell_code_unquoted_must_be_words(golden_job, ascend, target, says):
    job, pool = _set(target, PAYLOAD)(golden_job, ascend)
    with pytest.raises(UserError, match=says):
        render_for_pool(job, pool)


# --------------------------------------------------------------------------- quoted and run


STUBS = {
    # srun records its arguments, then runs them: the task wrapper and torchrun run as on a node.
    "srun": 'printf "%s\\0" "$@" > "$STUB_OUT/srun.argv"\nexec "$@"\n',
    "torchrun": 'printf "%s\\0" "$@" > "$STUB_OUT/torchrun.argv"\nenv -0 > "$STUB_OUT/torchrun.env"\n',
    "scontrol": (
        'case "$1 $2" in\n'
        '  "show hostnames") echo node01 ;;\n'
        '  "show job") echo "   Nodes=node01 CPU_IDs=0-15 Mem=0 GRES=npu:910b:4(IDX:0-3)" ;;\n'
        "  *) exit 1 ;;\n"
        "esac\n"
    ),
}


def _run_script(script: str, tmp_path: Path) -> tuple[list[str], dict[str, str], subprocess.CompletedProcess]:
    stubs, out, run = tmp_path / "bin", tmp_path / "out", tmp_path / "run"
    for folder in (stubs, out, run):
        folder.mkdir()
    for name, body in STUBS.items():
        (stubs / name).write_text("#!/bin/bash\n" + body)
        (stubs / name).chmod(0o755)
    (run / "job.sbatch").write_text(script)
    env = {
        "PATH": f"{stubs}:/usr/bin:/bin", "HOME": str(tmp_path), "STUB_OUT": str(out),
        "SLURM_JOB_NODELIST": "node01", "SLURM_JOB_ID": "42", "SLURMD_NODENAME": "node01",
    }
    done = subprocess.run(["bash", "job.sbatch"], cwd=run, env=env, capture_output=True, text=True, timeout=60)
    assert sorted(os.listdir(run)) == ["job.sbatch"], "the script created files: an injected command ran"
    assert not list(tmp_path.rglob("PWNED*")), "an injected touch ran"
    argv = (out / "torchrun.argv").read_bytes().decode().split("\0")[:-1] if (out / "torchrun.argv").exists() else []
    env_out = (out / "torchrun.env").read_bytes().decode().split("\0") if (out / "torchrun.env").exists() else []
    return argv, dict(item.split("=", 1) for item in env_out if "=" in item), done


def _directives(script: str) -> dict[str, str]:
    found = {}
    for line in script.splitlines():
        if line.startswith("#SBATCH"):
            for argument in directive_arguments(line):
                option, _, value = argument.partition("=")
                found[option] = value
    return found


TORCHRUN_HEAD = ["--nnodes=2", "--rdzv-backend=c10d", "--rdzv-endpoint=node01:29500", "--rdzv-id=42", "--nproc-per-node=4"]


@pytest.mark.parametrize(
    ("target", "directive"),
    [
        ("job.name", "--job-name"),
        ("job.workdir", "--chdir"),
        ("job.time_limit", "--time"),
        ("pool.ascend.slurm.partition", "--partition"),
        ("pool.ascend.slurm.account", "--account"),
        ("pool.ascend.slurm.qos", "--qos"),
        ("pool.ascend.slurm.constraint", "--constraint"),
    ],
)
def test_hostile_directive_values_are_quoted_for_sbatch_and_run_nothing(golden_job, ascend, tmp_path, target, directive):
    job, pool = _set(target, PAYLOAD)(golden_job, ascend)
    script = render_for_pool(job, pool).text
    assert sbatch_problems(script, "job.sbatch") == []
    assert _directives(script)[directive] == PAYLOAD  # sbatch reads the value whole, quotes and all
    argv, env, done = _run_script(script, tmp_path)
    assert done.returncode == 0, done.stderr
    assert argv == [*TORCHRUN_HEAD, *golden_job.command]
    assert env["ASCEND_RT_VISIBLE_DEVICES"] == "0,1,2,3"


@pytest.mark.parametrize("target", ["job.command[0]", "job.command[2]", "job.env.HOSTILE", "pool.name", "pool.ascend.vendor.name",
                                    "pool.ascend.vendor.torch_device", "pool.ascend.vendor.distributed_backend"])
@pytest.mark.parametrize("pool_name", ["ascend", "nvidia"])
def test_hostile_command_and_environment_reach_the_task_word_for_word(golden_job, golden_pools, tmp_path, target, pool_name):
    job, pool = _set(target, PAYLOAD)(golden_job, golden_pools[pool_name].on("slurm"))
    script = render_for_pool(job, pool).text
    assert sbatch_problems(script, "job.sbatch") == []
    argv, env, done = _run_script(script, tmp_path)
    assert done.returncode == 0, done.stderr
    assert argv == [*TORCHRUN_HEAD, *job.command]
    if target == "job.env.HOSTILE":
        assert env["HOSTILE"] == PAYLOAD
    if target == "pool.name":
        assert env["ACCELPORT_POOL"] == PAYLOAD
    if target.endswith("torch_device"):
        assert env["ACCELPORT_DEVICE"] == PAYLOAD
    if target.endswith("distributed_backend"):
        assert env["ACCELPORT_DIST_BACKEND"] == PAYLOAD


def test_a_single_node_job_runs_its_command_without_torchrun_rendezvous(golden_job, golden_pools, tmp_path):
    job = replace(golden_job, nodes=1, launcher="none", command=("torchrun", PAYLOAD, "--flag"))
    argv, _, done = _run_script(render_for_pool(job, golden_pools["nvidia"].on("slurm")).text, tmp_path)
    assert done.returncode == 0, done.stderr
    assert argv == [PAYLOAD, "--flag"]


def test_workdir_with_a_space_is_one_quoted_directive(golden_job, ascend):
    script = render_for_pool(replace(golden_job, workdir="/data/my runs"), ascend).text
    assert '#SBATCH --chdir="/data/my runs"' in script.splitlines()


# --------------------------------------------------------------------------- validate reads directives as sbatch does


@pytest.mark.parametrize(
    ("line", "arguments"),
    [
        ("#SBATCH --nodes=2", ["--nodes=2"]),
        ("#SBATCH --nodes=2 --ntasks=1", ["--nodes=2", "--ntasks=1"]),  # several on one line
        ('#SBATCH --chdir="/a b"', ["--chdir=/a b"]),
        ("#SBATCH --chdir='/a b'", ["--chdir=/a b"]),
        ('#SBATCH --comment="say \\"hi\\""', ['--comment=say "hi"']),
        ("#SBATCH --comment=a\\ b", ["--comment=a b"]),
        ("#SBATCH --comment=$(id)", ["--comment=$(id)"]),  # no shell expansion in directives
        ("#SBATCH --qos=normal # the default", ["--qos=normal"]),
        ("#SBATCH --qos=a#b", ["--qos=a"]),  # an unquoted # ends the line
        ('#SBATCH --qos="a#b"', ["--qos=a#b"]),
        ("#SBATCH -N 2", ["-N", "2"]),
    ],
)
def test_directive_lines_are_read_as_sbatch_reads_them(line, arguments):
    assert directive_arguments(line) == arguments


@pytest.mark.parametrize("line", ['#SBATCH --chdir="/a b', "#SBATCH --chdir='/a b", "#SBATCH --chdir=/a\\"])
def test_directives_sbatch_cannot_read_are_errors(line):
    with pytest.raises(DirectiveError):
        directive_arguments(line)


def _problem_lines(script: str) -> dict[str, str]:
    return {p.path: p.message for p in sbatch_problems(script, "job.sbatch") if p.check == "sbatch"}


def test_validate_catches_a_line_injected_between_the_directives(golden_job, ascend):
    lines = render_for_pool(golden_job, ascend).text.splitlines()
    # What a raw newline in a workdir rendered before: a bare command after --partition.
    injected = "\n".join([*lines[:4], "touch /tmp/pwned", *lines[4:]]) + "\n"
    problems = _problem_lines(injected)
    assert "line 6" in problems and "comes after the first command: sbatch ignores it" in problems["line 6"]
    assert len(problems) == sum(line.startswith("#SBATCH") for line in lines[4:])


@pytest.mark.parametrize(
    ("bad_line", "says"),
    [
        ('#SBATCH --chdir="/data/my runs', "unterminated \" quote"),
        ("#SBATCH --chdir=/data\\", "lone backslash"),
        ("#SBATCH chdir=/data", "no option after #SBATCH"),
        ("#SBATCH --chdir=/data\r", "control character '\\r'"),
        ("#SBATCH --comment=\x1b[2J", "control character '\\x1b'"),
    ],
)
def test_validate_fails_a_directive_sbatch_cannot_hold(golden_job, ascend, bad_line, says):
    lines = render_for_pool(golden_job, ascend).text.splitlines()
    script = "\n".join([*lines[:3], bad_line, *lines[3:]]) + "\n"
    problems = _problem_lines(script)
    assert list(problems) == ["line 4"] and says in problems["line 4"], problems


def test_cli_render_of_one_pool_to_a_file_is_a_runnable_script(cli, tmp_path):
    examples = Path(__file__).resolve().parents[2] / "examples" / "pools"
    out = tmp_path / "job.sbatch"
    pools = ["--pools", examples / "cuda-pool.toml", "--pools", examples / "ascend-pool.toml"]
    result = cli("pools", "render", examples / "job.toml", *pools, "--engine", "slurm", "--pool", "ascend", "-o", out)
    assert result.code == 0, result.err
    text = out.read_text()
    assert text.startswith("#!/bin/bash\n") and "# ----" not in text
    assert cli("pools", "validate", "--files", out).code == 0
    both = cli("pools", "render", examples / "job.toml", *pools, "--engine", "slurm")
    assert both.out.count("# ---- ") == 2  # several files on stdout: each named
