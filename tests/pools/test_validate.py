"""Validation catches what each layer is for: strict schemas, CRD schemas, and what schemas miss."""

from __future__ import annotations

import copy

import pytest

from accelport.pools.kubernetes import render_kueue, render_volcano_queues
from accelport.pools.render import render_for_pool
from accelport.pools.validate import crd_schemas, sbatch_problems, validate_object


@pytest.fixture
def batch_job(golden_job, golden_pools):
    objects = render_for_pool(golden_job, golden_pools["nvidia"].on("kubernetes")).objects
    return copy.deepcopy(next(o for o in objects if o["kind"] == "Job"))


@pytest.fixture
def volcano_job(golden_job, golden_pools):
    return copy.deepcopy(render_for_pool(golden_job, golden_pools["ascend"].on("kubernetes")).objects[0])


def _container(job):
    return job["spec"]["template"]["spec"]["containers"][0]


def test_rendered_objects_pass(batch_job, volcano_job):
    assert validate_object(batch_job) == []
    assert validate_object(volcano_job) == []


def test_device_count_as_word_is_caught_although_the_schema_accepts_it(batch_job):
    _container(batch_job)["resources"]["limits"]["nvidia.com/gpu"] = "two"
    _container(batch_job)["resources"]["requests"]["nvidia.com/gpu"] = "two"
    problems = validate_object(batch_job)
    assert [p.check for p in problems] == ["resources", "resources"]
    assert "whole device count" in problems[0].message
    assert problems[0].path == "spec.template.spec.containers.0.resources.limits.nvidia.com/gpu"


def test_fractional_device_count_is_caught(batch_job):
    _container(batch_job)["resources"]["limits"]["nvidia.com/gpu"] = "0.5"
    _container(batch_job)["resources"]["requests"]["nvidia.com/gpu"] = "0.5"
    assert any("whole device count" in p.message for p in validate_object(batch_job))


def test_requests_different_from_limits_are_caught(batch_job):
    _container(batch_job)["resources"]["requests"]["nvidia.com/gpu"] = 2
    problems = validate_object(batch_job)
    assert len(problems) == 1
    assert "must equal limits" in problems[0].message


def test_extended_resource_without_limit_is_caught(batch_job):
    del _container(batch_job)["resources"]["limits"]["nvidia.com/gpu"]
    assert any("has no limit" in p.message for p in validate_object(batch_job))


def test_cpu_and_memory_may_differ_between_requests_and_limits(batch_job):
    _container(batch_job)["resources"]["requests"]["cpu"] = "8"
    assert validate_object(batch_job) == []


def test_strict_schema_rejects_unknown_field_and_missing_name(batch_job):
    _container(batch_job)["imagee"] = "typo"
    problems = validate_object(batch_job)
    assert problems and problems[0].check == "schema"
    assert "imagee" in problems[0].message
    del _container(batch_job)["imagee"]
    del _container(batch_job)["name"]
    assert any("'name' is a required property" in p.message for p in validate_object(batch_job))


def test_volcano_job_checked_against_crd(volcano_job):
    volcano_job["spec"]["minAvailable"] = -1
    volcano_job["spec"]["queuee"] = "x"
    problems = validate_object(volcano_job)
    messages = " ".join(p.message for p in problems)
    assert "-1 is less than the minimum of 0" in messages
    assert "'queuee' was unexpected" in messages
    assert {p.check for p in problems} == {"crd"}


def test_volcano_task_pod_template_checked_strictly(volcano_job):
    container = volcano_job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]
    container["resource"] = {}  # typo for `resources`
    problems = validate_object(volcano_job)
    assert problems and problems[0].check == "schema"
    assert problems[0].path.startswith("spec.tasks.0.template.spec.containers")


def test_volcano_task_device_count_checked(volcano_job):
    container = volcano_job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]
    container["resources"]["requests"]["huawei.com/Ascend910"] = 8
    assert any("must equal limits" in p.message for p in validate_object(volcano_job))


def test_kueue_objects_checked_per_api_version(golden_pools):
    pool = golden_pools["nvidia"].on("kubernetes")
    objects = render_kueue([pool])
    assert [o["kind"] for o in objects] == ["ResourceFlavor", "ClusterQueue", "LocalQueue"]
    assert all(validate_object(o) == [] for o in objects)
    cluster_queue = copy.deepcopy(objects[1])
    # v1beta2 renamed `cohort` to `cohortName`: the old name is an error there ...
    cluster_queue["spec"]["cohort"] = cluster_queue["spec"].pop("cohortName")
    assert any("'cohort' was unexpected" in p.message for p in validate_object(cluster_queue))
    # ... and the right one under v1beta1.
    cluster_queue["apiVersion"] = "kueue.x-k8s.io/v1beta1"
    assert validate_object(cluster_queue) == []
    cluster_queue["spec"]["queueingStrategy"] = "Fastest"
    assert any("'Fastest' is not one of" in p.message for p in validate_object(cluster_queue))


def test_volcano_queue_checked(golden_pools):
    queue = render_volcano_queues([golden_pools["ascend"].on("kubernetes")])[0]
    assert validate_object(queue) == []
    queue["spec"]["weight"] = "heavy"
    assert any("is not of type 'integer'" in p.message for p in validate_object(queue))


def test_unknown_custom_kind_is_a_problem_not_a_pass():
    obj = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Cohort", "metadata": {"name": "x"}, "spec": {}}
    problems = validate_object(obj)
    assert problems and "no CRD schema" in problems[0].message


def test_crd_schemas_carry_their_source():
    schemas = crd_schemas()
    assert {k for _, k in schemas} == {"ResourceFlavor", "ClusterQueue", "LocalQueue", "Job", "Queue"}
    for entry in schemas.values():
        assert entry["source"]["licence"] == "Apache-2.0"
        assert len(entry["source"]["commit"]) == 40
        assert entry["source"]["repo"] in ("kubernetes-sigs/kueue", "volcano-sh/volcano")


def test_sbatch_checks(golden_job, golden_pools):
    script = render_for_pool(golden_job, golden_pools["ascend"].on("slurm")).text
    assert sbatch_problems(script, "a.sbatch") == []
    broken = script.replace("#SBATCH --nodes=2", "#SBATCH nodes=2").replace("head -n 1)", "head -n 1")
    checks = {p.check for p in sbatch_problems(broken, "a.sbatch")}
    assert checks == {"sbatch", "bash"}
