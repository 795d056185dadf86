"""Job and pool files: clear one-line errors; the CLI's four actions on the examples."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from accelport.errors import UserError
from accelport.pools.kubernetes import render_http_route, render_kueue
from accelport.pools.model import job_from_toml, load_pools
from accelport.pools.probes import parse_kueue, parse_volcano, probe_pools
from accelport.pools.render import render_admin
from accelport.pools.slurm import gres_conf, slurm_conf
from accelport.pools.validate import validate_object

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "pools"
GOLDEN = Path(__file__).resolve().parent / "golden"
JOB = str(EXAMPLES / "job.toml")
POOLS = ["--pools", str(EXAMPLES / "cuda-pool.toml"), "--pools", str(EXAMPLES / "ascend-pool.toml")]


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('[job]\nname = "ft"\ncommand = ["t.py"]\nnodes = "two"\n', "job.nodes must be an integer, got 'two'"),
        ('[job]\nname = "ft"\ncommand = ["t.py"]\nnodes = true\n', "job.nodes must be an integer, got True"),
        ('[job]\nname = "ft"\ncommand = ["t.py"]\ndevices_per_node = 0\n', "job.devices_per_node must be an integer >= 1"),
        ('[job]\nname = "ft"\ncommand = ["t.py"]\nnode = 2\n', "unknown key(s) node"),
        ('[job]\nname = "FT_1"\ncommand = ["t.py"]\n', "job.name 'FT_1' must be lower-case"),
        ('[job]\nname = "ft"\ncommand = ["t.py"]\nmemory = "64GB"\n', "job.memory '64GB' must be an integer with Ki"),
        ('[job]\nname = "ft"\ncommand = ["t.py"]\n[job.images]\ncudaa = "x"\n', "job.images.cudaa is not a known vendor"),
        ('[job]\nname = "ft"\n', "job.command is missing"),
        ("[job\n", "not valid TOML"),
    ],
)
def test_bad_job_files_name_the_file_and_the_key(tmp_path, text, expected):
    path = _write(tmp_path, "job.toml", text)
    with pytest.raises(UserError) as info:
        job_from_toml(path)
    assert str(path) in str(info.value) and expected in str(info.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('[[pool]]\nname = "a"\nvendor = "nvidia"\nengine = "slurm"\n', "vendor 'nvidia' is unknown; known vendors:"),
        ('[[pool]]\nname = "a"\nvendor = "cuda"\nengine = "k8s"\n', "engine must be one of slurm, kubernetes; got 'k8s'"),
        ('[[pool]]\nname = "a"\nvendor = "cuda"\nengine = "slurm"\n', "there is no [pool.slurm] table"),
        ('[[pool]]\nname = "a"\nvendor = "cuda"\nengine = "slurm"\nstate = "paused"\n[pool.slurm]\npartition = "p"\n', "pool.a.state must be one of"),
        ('[[pool]]\nname = "a"\nvendor = "npu"\nengine = "kubernetes"\n[pool.kubernetes]\nscheduler = "volcano"\n', "kubernetes.queue is missing"),
        ('[[pool]]\nname = "a"\nvendor = "cuda"\nengine = "slurm"\n[pool.slurm]\npartition = "p"\ngpus = 8\n', "pool.a.slurm has unknown key(s) gpus"),
    ],
)
def test_bad_pool_files_name_the_file_and_the_key(tmp_path, text, expected):
    path = _write(tmp_path, "pools.toml", text)
    with pytest.raises(UserError) as info:
        load_pools([path])
    assert str(path) in str(info.value) and expected in str(info.value)


def test_duplicate_pool_names_across_files(tmp_path):
    text = '[[pool]]\nname = "a"\nvendor = "cuda"\nengine = "slurm"\n[pool.slurm]\npartition = "p"\n'
    with pytest.raises(UserError, match="also defined in"):
        load_pools([_write(tmp_path, "a.toml", text), _write(tmp_path, "b.toml", text)])


def test_kueue_cluster_queue_matches_golden(golden_pools):
    """Written by hand (tests/pools/golden/kueue-nvidia.yaml): cpu, memory and device quotas."""
    expected = [doc for doc in yaml.safe_load_all((GOLDEN / "kueue-nvidia.yaml").read_text()) if doc]
    objects = render_kueue([golden_pools["nvidia"].on("kubernetes")])
    assert objects == expected
    for obj in objects:
        assert validate_object(obj) == [], obj["kind"]


def test_kueue_admin_objects_put_every_pool_in_one_cohort(golden_pools):
    cuda = golden_pools["nvidia"].on("kubernetes")
    example = load_pools([EXAMPLES / "cuda-pool.toml"])[0].on("kubernetes")
    # The example names its cohort, the golden pool takes the default: two cohorts cannot lend.
    with pytest.raises(UserError, match=r"different cohorts: cuda \(accel-pools\), nvidia \(accelport-pools\)"):
        render_kueue([example, cuda])
    same = replace(cuda, kubernetes=replace(cuda.kubernetes, kueue=replace(cuda.kubernetes.kueue, cohort="accel-pools")))
    objects = render_kueue([example, same])
    queues = [o for o in objects if o["kind"] == "ClusterQueue"]
    assert [q["spec"]["cohortName"] for q in queues] == ["accel-pools", "accel-pools"]
    cq = next(q for q in queues if q["metadata"]["name"] == "cuda-cq")
    group = cq["spec"]["resourceGroups"][0]
    # examples/pools/cuda-pool.toml: 16 nodes of 8 devices, 112 cpus and 2048Gi each.
    assert group["coveredResources"] == ["cpu", "memory", "nvidia.com/gpu"]
    assert group["flavors"] == [
        {
            "name": "cuda-h100",
            "resources": [
                {"name": "cpu", "nominalQuota": 1792},
                {"name": "memory", "nominalQuota": "32768Gi"},
                {"name": "nvidia.com/gpu", "nominalQuota": 128},
            ],
        }
    ]


def test_device_quota_defaults_to_the_pools_device_count(tmp_path, golden_pools):
    # The golden pool states nodes = 4 and devices_per_node = 4 but no capacity.
    nvidia = golden_pools["nvidia"].on("kubernetes")
    assert nvidia.capacity == 16
    text = ('[[pool]]\nname = "k"\nvendor = "cuda"\nengine = "kubernetes"\nnodes = 3\ncpus_per_node = 8\n'
            'memory_per_node = "64Gi"\n[pool.kubernetes]\nscheduler = "kueue"\nqueue = "k-lq"\n')
    pool = load_pools([_write(tmp_path, "k.toml", text)])[0]
    quotas = render_kueue([pool])[1]["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    # devices_per_node defaults to 8: 3 x 8, never 0.
    assert quotas == [
        {"name": "cpu", "nominalQuota": 24},
        {"name": "memory", "nominalQuota": "192Gi"},
        {"name": "nvidia.com/gpu", "nominalQuota": 24},
    ]
    # A pool built in code with nodes but no capacity still gets nodes x devices.
    quotas = render_kueue([replace(nvidia, capacity=0)])[1]["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    assert quotas[-1] == {"name": "nvidia.com/gpu", "nominalQuota": 16}


def test_capacity_that_contradicts_nodes_is_refused(tmp_path):
    text = '[[pool]]\nname = "a"\nvendor = "cuda"\nengine = "slurm"\ncapacity = 10\nnodes = 2\n[pool.slurm]\npartition = "p"\n'
    path = _write(tmp_path, "p.toml", text)
    with pytest.raises(UserError) as info:
        load_pools([path])
    assert str(path) in str(info.value) and "capacity is 10 but nodes x devices_per_node is 2 x 8 = 16" in str(info.value)


def test_kueue_pool_without_cpu_or_memory_per_node_is_refused(golden_pools):
    cuda = replace(golden_pools["nvidia"].on("kubernetes"), cpus_per_node=0)
    with pytest.raises(UserError, match=r"no cpus_per_node; set pool\.nvidia\.cpus_per_node"):
        render_kueue([cuda])
    with pytest.raises(UserError, match=r"no size: set pool\.nvidia\.nodes"):
        render_kueue([replace(cuda, cpus_per_node=8, nodes=0, capacity=0)])


def test_http_route_weights_and_deployments(tmp_path, golden_pools):
    job = job_from_toml(_write(tmp_path, "svc.toml", '[job]\nname = "llm"\ncommand = ["vllm", "serve", "m"]\nlauncher = "none"\n'
                               'devices_per_node = 1\n[job.service]\nport = 8000\n[job.images]\ncuda = "vllm:cuda"\nnpu = "vllm-ascend:npu"\n'))
    from accelport.pools.model import PoolState

    cuda = replace(golden_pools["nvidia"].on("kubernetes"), weight=90)
    ascend = replace(golden_pools["ascend"].on("kubernetes"), state=PoolState.CANARY, weight=10)
    artefacts = render_admin([cuda, ascend], job)
    route = next(a for a in artefacts if a.filename == "llm-httproute.yaml").objects[0]
    assert route["spec"]["rules"][0]["backendRefs"] == [
        {"name": "llm-nvidia", "port": 8000, "weight": 90},
        {"name": "llm-ascend", "port": 8000, "weight": 10},
    ]
    assert validate_object(route) == []
    route["spec"]["rules"][0]["backendRefs"][0]["weight"] = 1.5
    assert validate_object(route)
    with pytest.raises(UserError, match="batch job"):
        render_http_route(replace(job, service=None), [cuda], {})


def test_slurm_admin_snippets_are_sized_by_the_pools_nodes_not_the_job(golden_job, golden_pools):
    """Golden gres.conf / slurm.conf written by hand: nvidia nodes hold 4 devices, ascend nodes the default 8.

    The golden job asks for 4 devices per node; sizing by the job would write [0-3] for ascend.
    """
    pools = [golden_pools["nvidia"], golden_pools["ascend"]]
    assert golden_job.devices_per_node == 4 and golden_pools["ascend"].devices_per_node == 8
    files = {a.filename: a.text for a in render_admin(pools, golden_job)}
    assert files["gres.conf"] == (GOLDEN / "gres.conf").read_text() == gres_conf(pools)
    assert files["slurm.conf"] == (GOLDEN / "slurm.conf").read_text() == slurm_conf(pools)
    bigger = replace(golden_job, devices_per_node=8)
    assert {a.filename: a.text for a in render_admin(pools, bigger)}["gres.conf"] == files["gres.conf"]


def test_kueue_and_volcano_status_parsing(golden_pools):
    # Shaped like `kubectl get clusterqueue -o json` per the ClusterQueue CRD's status schema.
    cq = {
        "spec": {"resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [{"name": "f", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "64"}]}]}]},
        "status": {"pendingWorkloads": 3, "admittedWorkloads": 7, "flavorsUsage": [{"name": "f", "resources": [{"name": "nvidia.com/gpu", "total": "56"}]}]},
    }
    load = parse_kueue(golden_pools["nvidia"].on("kubernetes"), json.dumps(cq))
    assert (load.total, load.used, load.pending_jobs) == (64, 56, 3)
    queue = {"spec": {"capability": {"huawei.com/Ascend910": 32}}, "status": {"pending": 0, "allocated": {"huawei.com/Ascend910": "8", "cpu": "96"}}}
    load = parse_volcano(golden_pools["ascend"].on("kubernetes"), json.dumps(queue))
    assert (load.total, load.used, load.pending_jobs) == (32, 8, 0)


def test_probe_dry_run_lists_commands_and_runs_nothing(golden_pools):
    def refuse(argv):
        raise AssertionError(f"dry run ran {argv}")

    pools = [golden_pools["nvidia"].on("kubernetes"), golden_pools["ascend"].on("kubernetes"), golden_pools["amd"]]
    report = probe_pools(pools, dry_run=True, runner=refuse)
    assert report.loads == {}
    argvs = [c.argv for c in report.commands]
    assert ("kubectl", "get", "clusterqueues.kueue.x-k8s.io", "nvidia-cq", "--output=json") in argvs
    assert ("kubectl", "get", "queues.scheduling.volcano.sh", "ascend-q", "--output=json") in argvs
    assert any(a[0] == "sinfo" and "--partition=mi300" in a for a in argvs)


def test_cli_render_both_engines(cli, tmp_path):
    result = cli("pools", "render", JOB, *POOLS, "--engine", "kubernetes", "--admin", "--output-dir", tmp_path)
    assert result.code == 0, result.err
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [
        "gres.conf", "kueue-queues.yaml", "slurm.conf", "tinylm-train-ascend.yaml", "tinylm-train-cuda.yaml", "volcano-queues.yaml",
    ]
    result = cli("pools", "render", JOB, *POOLS, "--engine", "slurm")
    assert 'ASCEND_RT_VISIBLE_DEVICES="$(scontrol show job -d "$SLURM_JOB_ID" | accelport_gres_indices npu "$SLURMD_NODENAME")"' in result.out
    assert "#SBATCH --gres=gpu:h100:8" in result.out


def test_cli_validate_passes_examples_and_fails_a_planted_fault(cli, tmp_path):
    result = cli("pools", "validate", JOB, *POOLS, "--engine", "kubernetes", "--admin", "--format", "json")
    assert result.code == 0, result.out
    assert json.loads(result.out)["passed"] is True
    cli("pools", "render", JOB, *POOLS, "--engine", "kubernetes", "--pool", "cuda", "--output-dir", tmp_path)
    manifest = tmp_path / "tinylm-train-cuda.yaml"
    manifest.write_text(manifest.read_text().replace("nvidia.com/gpu: 8", "nvidia.com/gpu: two", 1))
    result = cli("pools", "validate", "--files", manifest)
    assert result.code == 1
    assert "'two' is not a whole device count" in result.out


def test_cli_route_and_submit_dry_run(cli, tmp_path):
    result = cli("pools", "route", JOB, *POOLS, "--simulate", "2000", "--format", "json")
    shares = json.loads(result.out)["shares"]
    assert shares["ascend"] == pytest.approx(0.2, abs=0.03)
    signals = _write(tmp_path, "load.json", json.dumps({"ascend": {"total": 64, "used": 64, "pending_jobs": 4}, "cuda": {"total": 128, "used": 0}}))
    result = cli("pools", "route", JOB, *POOLS, "--job-id", "tinylm-train", "--signals", signals, "--format", "json")
    assert json.loads(result.out)["pool"] == "cuda"
    result = cli("pools", "submit", JOB, *POOLS, "--dry-run", "--output-dir", tmp_path, "--pin", "ascend")
    assert result.code == 0
    assert f"would run: sbatch --parsable {tmp_path / 'tinylm-train-ascend.sbatch'}" in result.out
    assert (tmp_path / "tinylm-train-ascend.sbatch").exists()


def test_submit_without_the_client_names_the_dry_run_flag_on_the_command_line_only(cli, tmp_path, monkeypatch):
    from accelport.errors import UserError
    from accelport.pools.render import Artefact
    from accelport.pools.submit import submit

    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    result = cli("pools", "submit", JOB, *POOLS, "--output-dir", tmp_path, "--pin", "ascend")
    _one_line_exit_2(result, "sbatch not found on PATH; install the sbatch client, or make a dry run to see the command (--dry-run)")
    with pytest.raises(UserError) as caught:
        submit(Artefact("x.sbatch", "sbatch", "#!/bin/bash\n"), tmp_path)
    assert str(caught.value).endswith("to see the command (dry_run)") and "--" not in str(caught.value)


def test_no_pool_files_names_the_parameter_in_code():
    from accelport.errors import UserError
    from accelport.pools.model import load_pools

    with pytest.raises(UserError, match=r"^no pool files given; name at least one \(see examples/pools/\) \(paths\)$"):
        load_pools([])


def test_cli_errors_are_one_line_exit_2(cli, tmp_path):
    result = cli("pools", "render", tmp_path / "missing.toml", *POOLS)
    assert result.code == 2 and "file not found" in result.err and len(result.err.strip().splitlines()) == 1
    result = cli("pools", "route", JOB, *POOLS, "--signals", _write(tmp_path, "bad.json", "{"))
    assert result.code == 2 and "not valid JSON" in result.err


def _one_line_exit_2(result, *expected):
    assert result.code == 2, (result.code, result.out, result.err)
    assert "Traceback" not in result.err and len(result.err.strip().splitlines()) == 1, result.err
    for text in expected:
        assert text in result.err, result.err


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("list.yaml", "- a\n- b\n", "YAML document 1 is a list, not a mapping"),
        ("mixed.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n---\njust text\n", "YAML document 2 is a str, not a mapping"),
        ("empty.yaml", "", "is empty"),
        ("blank.sbatch", "\n  \n", "is empty"),
        ("nothing.yaml", "---\n---\n", "holds no Kubernetes objects"),
    ],
)
def test_cli_validate_files_bad_input_is_one_line_exit_2(cli, tmp_path, name, text, expected):
    path = _write(tmp_path, name, text)
    _one_line_exit_2(cli("pools", "validate", "--files", path), str(path), expected)


@pytest.mark.parametrize("version", ["9.99", "banana", "1"])
def test_cli_unknown_kubernetes_version_is_one_line_exit_2(cli, version):
    result = cli("pools", "validate", JOB, *POOLS, "--engine", "kubernetes", "--k8s-version", version)
    _one_line_exit_2(result, f"--k8s-version {version!r}", "use one of 1.")


def test_cli_known_kubernetes_version_still_validates(cli):
    assert cli("pools", "validate", JOB, *POOLS, "--engine", "kubernetes", "--k8s-version", "1.30").code == 0


def test_cli_unwritable_output_folders_are_one_line_exit_2(cli, tmp_path):
    blocker = _write(tmp_path, "a-file", "x")  # a folder below a file cannot be made, even by root
    _one_line_exit_2(cli("pools", "render", JOB, *POOLS, "--output-dir", blocker / "out"), str(blocker / "out"), "--output-dir")
    _one_line_exit_2(cli("pools", "render", JOB, *POOLS, "--output-dir", blocker), "is not a directory")
    result = cli("pools", "submit", JOB, *POOLS, "--dry-run", "--output-dir", blocker / "w")
    _one_line_exit_2(result, str(blocker / "w"), "--output-dir")


@pytest.mark.parametrize(("flag", "expected"), [("job", "has no [job] table"), ("pools", "has no [[pool]] table")])
def test_cli_empty_spec_files_are_one_line_exit_2(cli, tmp_path, flag, expected):
    empty = _write(tmp_path, "empty.toml", "")
    argv = [empty, *POOLS] if flag == "job" else [JOB, "--pools", empty]
    _one_line_exit_2(cli("pools", "render", *argv), str(empty), expected)


@pytest.mark.parametrize("action", ["route", "submit"])
def test_cli_pin_to_an_unknown_pool_is_one_line_exit_2(cli, tmp_path, action):
    extra = ["--dry-run", "--output-dir", tmp_path] if action == "submit" else []
    result = cli("pools", action, JOB, *POOLS, "--pin", "ascned", *extra)
    _one_line_exit_2(result, "--pin: no pool named 'ascned'; pools given: cuda, ascend")
    assert not list(tmp_path.iterdir())  # nothing rendered or submitted
    # A known pool that cannot take the job is a routing outcome, not bad input: exit 1.
    drained = _write(tmp_path.parent, "drained.toml", (EXAMPLES / "ascend-pool.toml").read_text().replace('state = "canary"', 'state = "drain"'))
    result = cli("pools", "route", JOB, "--pools", EXAMPLES / "cuda-pool.toml", "--pools", drained, "--pin", "ascend")
    assert result.code == 1 and "drained" in result.out


def _pool_text(name: str, weight: int, state: str = "primary") -> str:
    return f'[[pool]]\nname = "{name}"\nvendor = "cuda"\nengine = "slurm"\nstate = "{state}"\nweight = {weight}\n[pool.slurm]\npartition = "p"\n'


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ([_pool_text("a", -5)], "pool.a.weight must be an integer >= 0, got -5"),
        ([_pool_text("a", 150)], "pool.a.weight is 150; a weight is the pool's share of the ramp in percent, 0 to 100"),
        ([_pool_text("a", 90), _pool_text("b", 20, "canary")], "weights add up to 110% (a 90 + b 20)"),
        ([_pool_text("a", 1) + _pool_text("a", 2)], "pool 'a' is also defined earlier in the same file"),
        ([_pool_text("a", 1), _pool_text("a", 2)], "pool 'a' is also defined in"),
    ],
)
def test_cli_bad_ramp_and_duplicate_pools_are_one_line_exit_2(cli, tmp_path, files, expected):
    args = []
    for index, text in enumerate(files):
        args += ["--pools", _write(tmp_path, f"p{index}.toml", text)]
    _one_line_exit_2(cli("pools", "route", JOB, *args), expected)


def test_ramp_weights_that_fit_are_accepted_and_backups_do_not_count(cli, tmp_path):
    # 80 + 20 is the whole ramp; a backup's weight is not part of it.
    args = ["--pools", _write(tmp_path, "a.toml", _pool_text("a", 80) + _pool_text("b", 20, "canary") + _pool_text("c", 50, "backup"))]
    assert cli("pools", "route", JOB, *args).code == 0


def test_cli_repeated_names_and_files_are_one_line_exit_2(cli):
    _one_line_exit_2(cli("pools", "render", JOB, *POOLS, "--pool", "cuda", "--pool", "cuda"), "--pool cuda given more than once")
    _one_line_exit_2(cli("pools", "route", JOB, *POOLS, "--pools", EXAMPLES / "cuda-pool.toml"), "given twice as a pool file", "give each pool file once (--pools)")
    _one_line_exit_2(cli("pools", "route", JOB, *POOLS, "--simulate", "0"), "--simulate 0: give a number of job ids, 1 or more")
    _one_line_exit_2(cli("pools", "route", JOB, *POOLS, "--simulate", "-5"), "--simulate -5")
