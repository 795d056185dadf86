"""Render a job as Kubernetes objects: a batch/v1 Job (plain or Kueue) or a Volcano Job.

Also the admin artefacts a pool needs once: Kueue ResourceFlavor / ClusterQueue /
LocalQueue (every pool's ClusterQueue in one cohort), a Volcano Queue, and for inference
services one Deployment and Service per pool behind a weighted Gateway API HTTPRoute.
"""

from __future__ import annotations

from typing import Any

from accelport.errors import UserError
from accelport.pools.launch import image_for, injected_env, launch_command, scheduler_facts
from accelport.pools.model import JobSpec, Pool, PoolState, check_renderable, scale_memory

MANAGED_BY = {"app.kubernetes.io/managed-by": "accelport"}


def object_name(job: JobSpec, pool: Pool) -> str:
    """The job's name on a pool: job name plus pool name, so two pools never collide."""
    name = f"{job.name}-{pool.name}"
    if len(name) > 52:
        # batch/v1 Job names become pod hostnames with an index suffix: keep room for it.
        raise UserError(f"{job.source or job.name}: '{name}' (job name + pool name) is longer than 52 characters; shorten job.name")
    return name


def _labels(job: JobSpec, pool: Pool) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": job.name,
        **MANAGED_BY,
        "accelport.io/pool": pool.name,
        "accelport.io/vendor": pool.vendor.key,
    }


def _container(job: JobSpec, pool: Pool, command: list[str], name: str) -> dict[str, Any]:
    kube = pool.kubernetes
    assert kube is not None
    resources: dict[str, Any] = {kube.resource: job.devices_per_node, "cpu": str(job.cpus_per_node)}
    if job.memory:
        resources["memory"] = job.memory
    container: dict[str, Any] = {
        "name": name,
        "image": image_for(job, pool),
        "command": command,
        "env": [{"name": k, "value": v} for k, v in injected_env(job, pool).items()],
        # Extended resources must have requests equal to limits; say both explicitly.
        "resources": {"limits": dict(resources), "requests": dict(resources)},
    }
    if job.workdir:
        container["workingDir"] = job.workdir
    if job.service is not None:
        container["ports"] = [{"name": "http", "containerPort": job.service.port}]
    return container


def _pod_spec(job: JobSpec, pool: Pool, command: list[str], name: str, restart: str) -> dict[str, Any]:
    kube = pool.kubernetes
    assert kube is not None
    spec: dict[str, Any] = {"restartPolicy": restart}
    if kube.scheduler_name:
        spec["schedulerName"] = kube.scheduler_name
    if kube.node_selector:
        spec["nodeSelector"] = dict(kube.node_selector)
    if kube.tolerations:
        spec["tolerations"] = [dict(t) for t in kube.tolerations]
    spec["containers"] = [_container(job, pool, command, name)]
    return spec


def render_batch_job(job: JobSpec, pool: Pool) -> list[dict[str, Any]]:
    """A batch/v1 Indexed Job, one pod per node; across nodes a headless Service for rendezvous."""
    kube = pool.kubernetes
    assert kube is not None
    name = object_name(job, pool)
    labels = _labels(job, pool)
    job_labels = dict(labels)
    if kube.scheduler == "kueue":
        job_labels[scheduler_facts()["kueue"]["queue_label"]] = kube.queue
    # Pods of an Indexed Job with `subdomain` are reachable as <job>-<index>.<subdomain>.
    command = launch_command(job, f"{name}-0.{name}", name)
    pod_spec = _pod_spec(job, pool, command, "trainer", "Never")
    objects: list[dict[str, Any]] = []
    if job.nodes > 1:
        pod_spec = {"subdomain": name, **pod_spec}
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": name, "namespace": kube.namespace, "labels": labels},
                "spec": {
                    "clusterIP": "None",
                    "selector": {"batch.kubernetes.io/job-name": name},
                    "ports": [{"name": "rdzv", "port": job.rdzv_port}],
                },
            }
        )
    spec: dict[str, Any] = {
        "completionMode": "Indexed",
        "completions": job.nodes,
        "parallelism": job.nodes,
        "backoffLimit": 0,
    }
    if kube.scheduler == "kueue":
        spec["suspend"] = True  # Kueue unsuspends the Job when it admits it
    if job.time_limit_seconds:
        spec["activeDeadlineSeconds"] = job.time_limit_seconds
    spec["template"] = {"metadata": {"labels": labels}, "spec": pod_spec}
    objects.append(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "namespace": kube.namespace, "labels": job_labels},
            "spec": spec,
        }
    )
    return objects


def render_volcano_job(job: JobSpec, pool: Pool) -> list[dict[str, Any]]:
    """A Volcano Job: one task of `nodes` replicas, gang-scheduled (minAvailable = nodes)."""
    kube = pool.kubernetes
    assert kube is not None
    name = object_name(job, pool)
    labels = _labels(job, pool)
    # The svc plugin makes pods reachable as <job>-<task>-<index>.<job>.
    command = launch_command(job, f"{name}-worker-0.{name}", name)
    spec: dict[str, Any] = {
        "schedulerName": scheduler_facts()["volcano"]["scheduler_name"],
        "queue": kube.queue,
        "minAvailable": job.nodes,
        "policies": [{"event": "PodEvicted", "action": "RestartJob"}],
    }
    if job.nodes > 1:
        spec["plugins"] = {"svc": [], "env": []}
    spec["tasks"] = [
        {
            "name": "worker",
            "replicas": job.nodes,
            "template": {"metadata": {"labels": labels}, "spec": _pod_spec(job, pool, command, "trainer", "Never")},
        }
    ]
    if job.time_limit_seconds:
        spec["tasks"][0]["template"]["spec"] = {
            "activeDeadlineSeconds": job.time_limit_seconds,
            **spec["tasks"][0]["template"]["spec"],
        }
    return [
        {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "metadata": {"name": name, "namespace": kube.namespace, "labels": labels},
            "spec": spec,
        }
    ]


def render_kubernetes(job: JobSpec, pool: Pool) -> list[dict[str, Any]]:
    """The objects to create for this job on this Kubernetes pool."""
    kube = pool.kubernetes
    if kube is None or pool.engine != "kubernetes":
        raise ValueError(f"pool {pool.name} is not a Kubernetes pool")
    check_renderable(job, pool)
    if job.service is not None:
        return render_deployment(job, pool)
    if kube.scheduler == "volcano":
        return render_volcano_job(job, pool)
    return render_batch_job(job, pool)


# --------------------------------------------------------------------------- admin artefacts


def _kueue_quotas(pool: Pool) -> list[dict[str, Any]]:
    """The flavor's quotas: cpu, memory and the device, in the order of `coveredResources`.

    A Job's pods request cpu and memory as well as devices, and Kueue admits no workload
    asking for a resource its ClusterQueue does not cover: all three are needed.
    """
    kube, queue = pool.kubernetes, pool.kubernetes.kueue if pool.kubernetes else None
    assert kube is not None and queue is not None
    where = f"{pool.source}: pool {pool.name!r} has a Kueue ClusterQueue"
    nodes = pool.node_count
    if not nodes:
        raise UserError(f"{where} but no size: set pool.{pool.name}.nodes (and devices_per_node) or capacity")
    missing = [key for key, value in (("cpus_per_node", pool.cpus_per_node), ("memory_per_node", pool.memory_per_node)) if not value]
    if missing:
        raise UserError(
            f"{where} but no {' or '.join(missing)}; set {', '.join(f'pool.{pool.name}.{k}' for k in missing)} "
            "(its cpu and memory quotas are nodes x these)"
        )
    # Never 0: a zero quota admits nothing unless borrowed, which silently starves the pool.
    device: dict[str, Any] = {"name": kube.resource, "nominalQuota": pool.devices}
    if queue.borrowing_limit is not None:
        device["borrowingLimit"] = queue.borrowing_limit
    if queue.lending_limit is not None:
        device["lendingLimit"] = queue.lending_limit
    return [
        {"name": "cpu", "nominalQuota": nodes * pool.cpus_per_node},
        {"name": "memory", "nominalQuota": scale_memory(pool.memory_per_node, nodes)},
        device,
    ]


def render_kueue(pools: list[Pool]) -> list[dict[str, Any]]:
    """ResourceFlavor, ClusterQueue and LocalQueue per Kueue pool; every ClusterQueue in one cohort.

    One ClusterQueue per pool, because Kueue flavors only add node labels and tolerations:
    they cannot turn an nvidia.com/gpu request into a huawei.com/Ascend910 one. One cohort,
    so the pools of a migration lend each other unused quota.
    """
    facts = scheduler_facts()["kueue"]
    kueue_pools = [p for p in pools if p.kubernetes is not None and p.kubernetes.kueue is not None]
    cohorts = {p.kubernetes.kueue.cohort: p for p in kueue_pools if p.kubernetes and p.kubernetes.kueue}
    if len(cohorts) > 1:
        named = ", ".join(f"{p.name} ({cohort})" for cohort, p in sorted(cohorts.items()))
        raise UserError(
            f"Kueue pools name different cohorts: {named}; set one pool.NAME.kubernetes.kueue.cohort for all "
            "(one cohort lets the pools of a migration borrow each other's quota)"
        )
    objects: list[dict[str, Any]] = []
    for pool in kueue_pools:
        kube = pool.kubernetes
        assert kube is not None and kube.kueue is not None
        queue = kube.kueue
        api = f"kueue.x-k8s.io/{queue.api_version}"
        flavor_spec: dict[str, Any] = {}
        if kube.node_selector:
            flavor_spec["nodeLabels"] = dict(kube.node_selector)
        if kube.tolerations:
            flavor_spec["tolerations"] = [dict(t) for t in kube.tolerations]
        objects.append(
            {"apiVersion": api, "kind": "ResourceFlavor", "metadata": {"name": queue.flavor, "labels": dict(MANAGED_BY)}, "spec": flavor_spec}
        )
        quotas = _kueue_quotas(pool)
        cq_spec: dict[str, Any] = {
            facts["cohort_field"][queue.api_version]: queue.cohort,
            "namespaceSelector": {},
            "flavorFungibility": {"whenCanBorrow": "TryNextFlavor", "whenCanPreempt": "MayStopSearch"},
            "resourceGroups": [
                {"coveredResources": [q["name"] for q in quotas], "flavors": [{"name": queue.flavor, "resources": quotas}]}
            ],
        }
        if pool.state.closed:
            # Drain or down: nothing new is admitted, admitted work is not evicted by accelport
            # (HoldAndDrain would evict it).
            cq_spec["stopPolicy"] = "Hold"
        objects.append(
            {"apiVersion": api, "kind": "ClusterQueue", "metadata": {"name": queue.cluster_queue, "labels": dict(MANAGED_BY)}, "spec": cq_spec}
        )
        objects.append(
            {
                "apiVersion": api,
                "kind": "LocalQueue",
                "metadata": {"name": kube.queue, "namespace": kube.namespace, "labels": dict(MANAGED_BY)},
                "spec": {"clusterQueue": queue.cluster_queue},
            }
        )
    return objects


def render_volcano_queues(pools: list[Pool]) -> list[dict[str, Any]]:
    """A Volcano Queue per Volcano pool: weight is the pool's share, capability its device count."""
    objects = []
    for pool in pools:
        kube = pool.kubernetes
        if kube is None or kube.scheduler != "volcano":
            continue
        spec: dict[str, Any] = {"weight": max(pool.weight, 1), "reclaimable": pool.state is not PoolState.PRIMARY}
        if pool.devices:
            spec["capability"] = {kube.resource: pool.devices}
        objects.append(
            {
                "apiVersion": "scheduling.volcano.sh/v1beta1",
                "kind": "Queue",
                "metadata": {"name": kube.queue, "labels": dict(MANAGED_BY)},
                "spec": spec,
            }
        )
    return objects


def render_deployment(job: JobSpec, pool: Pool) -> list[dict[str, Any]]:
    """An inference server on one pool: a Deployment and the Service the HTTPRoute points at."""
    kube = pool.kubernetes
    assert kube is not None and job.service is not None
    name = object_name(job, pool)
    labels = _labels(job, pool)
    selector = {"app.kubernetes.io/name": job.name, "accelport.io/pool": pool.name}
    pod_spec = _pod_spec(job, pool, launch_command(job, None, name), "server", "Always")
    return [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": kube.namespace, "labels": labels},
            "spec": {
                "replicas": job.service.replicas,
                "selector": {"matchLabels": selector},
                "template": {"metadata": {"labels": labels}, "spec": pod_spec},
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": kube.namespace, "labels": labels},
            "spec": {"selector": selector, "ports": [{"name": "http", "port": job.service.port, "targetPort": "http"}]},
        },
    ]


def render_http_route(job: JobSpec, pools: list[Pool], weights: dict[str, int], gateway: str = "inference-gateway") -> dict[str, Any]:
    """A Gateway API HTTPRoute splitting requests between the pools' Services by weight.

    Weights are proportional (the gateway normalises them); a drained or down pool gets weight 0,
    which keeps its backend listed but sends it nothing.
    """
    if job.service is None:
        raise UserError(f"{job.source or job.name}: an HTTPRoute needs [job.service]; this job is a batch job")
    kube_pools = [p for p in pools if p.kubernetes is not None]
    if not kube_pools:
        raise UserError("no Kubernetes pool given; an HTTPRoute splits traffic between Kubernetes pools")
    namespaces = {p.kubernetes.namespace for p in kube_pools if p.kubernetes}
    if len(namespaces) != 1:
        raise UserError(f"pools span namespaces {', '.join(sorted(namespaces))}; one HTTPRoute needs them in one namespace")
    namespace = namespaces.pop()
    refs = [
        {"name": object_name(job, p), "port": job.service.port, "weight": int(weights.get(p.name, 0))}
        for p in kube_pools
    ]
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": job.name, "namespace": namespace, "labels": dict(MANAGED_BY)},
        "spec": {"parentRefs": [{"name": gateway}], "rules": [{"backendRefs": refs}]},
    }
