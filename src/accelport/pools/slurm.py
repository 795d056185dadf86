"""Render a job as a Slurm batch script, and the gres.conf / slurm.conf lines a pool needs."""

from __future__ import annotations

import re
import shlex

from accelport.pools.launch import injected_env, launch_command, scheduler_facts
from accelport.pools.model import JobSpec, Pool, check_renderable


def _slurm_memory(quantity: str) -> str:
    # Slurm's K/M/G/T suffixes are binary, like Kubernetes' Ki/Mi/Gi/Ti.
    return quantity[:-1]


_HEAD = "\x00head\x00"
_RUN = "\x00run\x00"


_PLACEHOLDERS = {_HEAD: "$head_node", _RUN: "$SLURM_JOB_ID"}
_IN_DOUBLE_QUOTES = re.compile(r'([\\"$`])')  # what a backslash must protect inside "..."


def _shell_word(arg: str) -> str:
    """Quote one argument; the rendezvous placeholders become shell variables, expanded by bash."""
    if _HEAD not in arg and _RUN not in arg:
        return shlex.quote(arg)
    pieces = re.split(f"({_HEAD}|{_RUN})", arg)
    return '"' + "".join(_PLACEHOLDERS.get(p) or _IN_DOUBLE_QUOTES.sub(r"\\\1", p) for p in pieces) + '"'


# How sbatch reads one `#SBATCH` line (src/sbatch/opt.c, _get_argument in Slurm 20-24):
# arguments split at whitespace; '...' or "..." group characters, whitespace included; a
# backslash takes the next character as it is, inside quotes too; an unquoted, unescaped #
# ends the line (a comment). Shell quoting ($'..', "$x") means nothing there.
_DIRECTIVE_PLAIN = re.compile(r"""^[^\s'"\\#]+$""")


def directive(option: str, value: str) -> str:
    """`#SBATCH --option=value`, the value quoted for sbatch's own parser where it needs it."""
    if _DIRECTIVE_PLAIN.match(value):
        return f"#SBATCH --{option}={value}"
    return f'#SBATCH --{option}="' + re.sub(r'(["\\])', r"\\\1", value) + '"'


class DirectiveError(ValueError):
    """A `#SBATCH` line that sbatch would read otherwise than it looks."""


def directive_arguments(line: str) -> list[str]:
    """The arguments sbatch reads from one `#SBATCH` line (without the `#SBATCH` word)."""
    arguments: list[str] = []
    current: list[str] = []
    started = quote = escaped = False
    for char in line[len("#SBATCH") :]:
        if escaped:
            current.append(char)
            escaped = False
        elif char == "\\":
            started = escaped = True
        elif quote:
            if char == quote:
                quote = False
            else:
                current.append(char)
        elif char in "'\"":
            started, quote = True, char
        elif char.isspace() or char == "#":
            if started:
                arguments.append("".join(current))
                current, started = [], False
            if char == "#":
                return arguments
        else:
            started = True
            current.append(char)
    if quote:
        raise DirectiveError(f"an unterminated {quote} quote")
    if escaped:
        raise DirectiveError("a lone backslash at the end")
    if started:
        arguments.append("".join(current))
    return arguments


def gres_request(pool: Pool, count: int) -> str:
    slurm = pool.slurm
    assert slurm is not None
    return ":".join(part for part in (slurm.gres, slurm.gres_type, str(count)) if part)


# Reads `scontrol show job -d` on stdin and prints the indices of the GRES `$1` allocated to
# node `$2`, comma-separated (0,2,3). Slurm prints one line per group of nodes:
#      Nodes=n[01-02] CPU_IDs=0-15 Mem=0 GRES=npu:910b:2(IDX:1-2),mlu:1(IDX:0)
# (GRES_IDX=npu:910b(IDX:1-2) before Slurm 20.11). Exit 1 when the node has none.
GRES_INDICES_SH = r"""accelport_gres_indices() {
  local line nodes
  while read -r line; do
    case $line in Nodes=*GRES*) ;; *) continue ;; esac
    nodes=${line%% *}; nodes=${nodes#Nodes=}
    if [ "$nodes" != "$2" ]; then
      scontrol show hostnames "$nodes" | grep -qxF -- "$2" || continue
    fi
    printf '%s\n' "$line" | awk -v name="$1" '
      { for (f = 1; f <= NF; f++) if ($f ~ /^GRES(_IDX)?=/) { s = $f; sub(/^GRES(_IDX)?=/, "", s)
          while (match(s, /\(IDX:[^)]*\)/)) {
            head = substr(s, 1, RSTART - 1); idx = substr(s, RSTART + 5, RLENGTH - 6)
            s = substr(s, RSTART + RLENGTH); sub(/^,/, "", s); split(head, part, ":")
            if (part[1] != name) continue
            n = split(idx, item, ",")
            for (i = 1; i <= n; i++) {
              if (item[i] !~ /^[0-9]+(-[0-9]+)?$/) continue
              m = split(item[i], r, "-"); hi = (m == 2) ? r[2] : r[1]
              for (d = r[1] + 0; d <= hi + 0; d++) out = out (out == "" ? "" : ",") d
            }
          } } }
      END { if (out == "") exit 1; print out }'
    return
  done
  return 1
}"""


def visible_devices_export(job: JobSpec, pool: Pool) -> tuple[str, str] | None:
    """The vendor variable each task must set itself and where its value comes from; None when Slurm sets it.

    Slurm exports CUDA_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES, ZE_AFFINITY_MASK and
    GPU_DEVICE_ORDINAL for the `gpu` GRES only. For any other GRES (npu, mlu, ...) each
    task reads the indices Slurm allocated to its node from `scontrol show job -d`
    ("gres-indices"); for a vendor on the `gpu` GRES whose variable is none of those
    (MUSA_VISIBLE_DEVICES) it copies the CUDA_VISIBLE_DEVICES Slurm set for the task
    ("copy-cuda"). Both happen per task, inside srun: two nodes of one job can hold
    different device indices.
    """
    facts = scheduler_facts()["slurm"]
    assert pool.slurm is not None
    variables = pool.vendor.visible_devices
    if not variables:
        return None
    if pool.slurm.gres == facts["gpu_gres_name"]:
        return None if set(variables) & set(facts["gpu_gres_env"]) else (variables[0], "copy-cuda")
    return variables[0], "gres-indices"


def _task_wrapper(pool: Pool, name: str, source: str) -> list[str]:
    """Shell functions that set `name` in each task, then exec the task's command."""
    gres = pool.slurm.gres if pool.slurm else ""
    if source == "copy-cuda":
        head = [f"# Slurm sets CUDA_VISIBLE_DEVICES for the '{gres}' GRES, not {name}: each task copies it."]
        value = '"${CUDA_VISIBLE_DEVICES:?Slurm set no CUDA_VISIBLE_DEVICES for this task}"'
        functions = "accelport_task"
    else:
        head = [
            f"# Slurm sets no {name} for the '{gres}' GRES: each task reads the device indices",
            "# allocated to its node from `scontrol show job -d`.",
            *GRES_INDICES_SH.splitlines(),
        ]
        missing = f"echo \"accelport: no '{gres}' device indices for $SLURMD_NODENAME in job $SLURM_JOB_ID\" >&2; exit 1"
        value = f'"$(scontrol show job -d "$SLURM_JOB_ID" | accelport_gres_indices {shlex.quote(gres)} "$SLURMD_NODENAME")" || {{ {missing}; }}'
        functions = "accelport_gres_indices accelport_task"
    return [*head, "accelport_task() {", f"  {name}={value}", f"  export {name}", '  exec "$@"', "}", f"export -f {functions}", ""]


def render_sbatch(job: JobSpec, pool: Pool) -> str:
    """A complete batch script for `sbatch`: one task per node, torchrun on each node."""
    slurm = pool.slurm
    if slurm is None or pool.engine != "slurm":
        raise ValueError(f"pool {pool.name} is not a Slurm pool")
    check_renderable(job, pool)
    profile = pool.vendor
    lines = [
        "#!/bin/bash",
        f"# Rendered by accelport: job {job.name!r} for pool {pool.name!r} ({profile.name}, device {profile.torch_device}, backend {profile.distributed_backend}).",
        directive("job-name", job.name),
        directive("partition", slurm.partition),
        f"#SBATCH --nodes={job.nodes}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --gres={gres_request(pool, job.devices_per_node)}",
        f"#SBATCH --cpus-per-task={job.cpus_per_node}",
    ]
    if job.memory:
        lines.append(directive("mem", _slurm_memory(job.memory)))
    if job.time_limit:
        lines.append(directive("time", job.time_limit))
    if slurm.constraint:
        lines.append(directive("constraint", slurm.constraint))
    if slurm.account:
        lines.append(directive("account", slurm.account))
    if slurm.qos:
        lines.append(directive("qos", slurm.qos))
    if job.workdir:
        lines.append(directive("chdir", job.workdir))
    if slurm.exclusive:
        lines.append("#SBATCH --exclusive")
    if slurm.requeue:
        lines.append("#SBATCH --requeue")
    lines += ["set -euo pipefail", ""]
    for name, value in injected_env(job, pool).items():
        lines.append(f"export {name}={shlex.quote(value)}")
    lines.append("")
    export = visible_devices_export(job, pool)
    srun = "srun"
    if export is not None:
        lines += _task_wrapper(pool, *export)
        srun = "srun bash -c 'accelport_task \"$@\"' accelport"
    if job.launcher == "torchrun" and job.nodes > 1:
        lines.append('head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)')
    command = launch_command(job, _HEAD, _RUN)
    rendered = " ".join(_shell_word(arg) for arg in command)
    lines.append(f"{srun} {rendered}")
    return "\n".join(lines) + "\n"


def gres_conf(pools: list[Pool], nodes: dict[str, str] | None = None) -> str:
    """gres.conf lines per Slurm pool, sized by the pool's nodes (devices_per_node), never by a job.

    AutoDetect where Slurm knows the vendor, File= otherwise. `nodes` maps pool name to its
    node list (default: a placeholder to fill in).
    """
    facts = scheduler_facts()["slurm"]
    lines = ["# gres.conf, rendered by accelport; fill in node names and device files for your site."]
    for pool in pools:
        if pool.slurm is None:
            continue
        check_renderable(pool=pool)
        nodelist = (nodes or {}).get(pool.name, f"<{pool.name}-nodes>")
        autodetect = facts["autodetect"].get(pool.vendor.key, "off")
        type_part = f" Type={pool.slurm.gres_type}" if pool.slurm.gres_type else ""
        last = pool.devices_per_node - 1
        files = f"/dev/<{pool.vendor.key}-device>[0-{last}]" if last else f"/dev/<{pool.vendor.key}-device>0"
        lines.append(f"NodeName={nodelist} AutoDetect={autodetect} Name={pool.slurm.gres}{type_part} File={files}")
    return "\n".join(lines) + "\n"


def slurm_conf(pools: list[Pool], nodes: dict[str, str] | None = None) -> str:
    """slurm.conf lines: GresTypes, one NodeName line (the pool's devices per node) and one partition per Slurm pool."""
    slurm_pools = [p for p in pools if p.slurm is not None]
    for pool in slurm_pools:
        check_renderable(pool=pool)
    gres_types = sorted({p.slurm.gres for p in slurm_pools if p.slurm})
    lines = ["# slurm.conf excerpt, rendered by accelport.", f"GresTypes={','.join(gres_types)}"]
    for pool in slurm_pools:
        assert pool.slurm is not None
        nodelist = (nodes or {}).get(pool.name, f"<{pool.name}-nodes>")
        cpus = f" CPUs={pool.cpus_per_node}" if pool.cpus_per_node else ""
        features = f" Features={pool.slurm.constraint}" if pool.slurm.constraint else ""
        lines.append(f"NodeName={nodelist}{cpus} Gres={gres_request(pool, pool.devices_per_node)}{features}")
    for pool in slurm_pools:
        assert pool.slurm is not None
        nodelist = (nodes or {}).get(pool.name, f"<{pool.name}-nodes>")
        # Slurm's DRAIN takes no new jobs and lets queued and running ones finish; DOWN queues
        # new jobs without starting them. accelport's drain and down map onto those.
        state = {"drain": "DRAIN", "down": "DOWN"}.get(pool.state.value, "UP")
        lines.append(f"PartitionName={pool.slurm.partition} Nodes={nodelist} State={state}")
    return "\n".join(lines) + "\n"
