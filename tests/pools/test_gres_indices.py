"""The shell parser every non-`gpu` GRES script uses to find its node's allocated device indices.

The input lines are `scontrol show job -d` output: the first block as printed by Slurm 22.05
(Debian 12's slurm-wlm) for a job holding two of three npu and one mlu; the others in the
same per-node format with what a bigger site prints (index lists with gaps, several node
lines, the GRES_IDX= spelling of Slurm before 20.11, IDX:N/A for a node without one).
"""

from __future__ import annotations

import subprocess

import pytest

from accelport.pools.slurm import GRES_INDICES_SH

SLURM_22_05 = """JobId=2 JobName=wrap
   UserId=root(0) GroupId=root(0) MCS_label=N/A
   Priority=4294901759 Nice=0 Account=(null) QOS=(null)
   JobState=RUNNING Reason=None Dependency=(null)
   Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0
   DerivedExitCode=0:0
   RunTime=00:00:03 TimeLimit=UNLIMITED TimeMin=N/A
   Partition=ascend AllocNode:Sid=vm:4242
   ReqNodeList=(null) ExcNodeList=(null)
   NodeList=vm
   BatchHost=vm
   NumNodes=1 NumCPUs=1 NumTasks=1 CPUs/Task=1 ReqB:S:C:T=0:0:*:*
   TRES=cpu=1,node=1,billing=1,gres/mlu=1,gres/npu=2
   Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=*
   JOB_GRES=npu:910b:2,mlu:1
     Nodes=vm CPU_IDs=1 Mem=0 GRES=npu:910b:2(IDX:1-2),mlu:1(IDX:0)
   MinCPUsNode=1 MinMemoryNode=0 MinTmpDiskNode=0
   Features=(null) DelayBoot=00:00:00
   OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null)
   Command=(null)
   WorkDir=/tmp
   StdErr=/dev/null
   StdIn=/dev/null
   StdOut=/dev/null
   TresPerNode=gres:npu:910b:2,gres:mlu:1
"""

TWO_NODES = """JobId=77 JobName=ft
   NodeList=n[1-2]
   JOB_GRES=npu:910b:8
     Nodes=n1 CPU_IDs=0-95 Mem=262144 GRES=npu:910b:4(IDX:0,2-3,6)
     Nodes=n2 CPU_IDs=0-95 Mem=262144 GRES=npu:910b:4(IDX:4-7)
"""


def indices(text: str, gres: str, node: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    script = GRES_INDICES_SH + '\naccelport_gres_indices "$1" "$2"\n'
    done = subprocess.run(["bash", "-c", script, "t", gres, node], input=text, capture_output=True, text=True, env=env, timeout=30)
    return done.returncode, done.stdout.strip()


def test_real_slurm_22_05_output():
    assert indices(SLURM_22_05, "npu", "vm") == (0, "1,2")
    assert indices(SLURM_22_05, "mlu", "vm") == (0, "0")


def test_each_node_reads_its_own_line_and_gaps_are_expanded():
    assert indices(TWO_NODES, "npu", "n1") == (0, "0,2,3,6")
    assert indices(TWO_NODES, "npu", "n2") == (0, "4,5,6,7")


@pytest.mark.parametrize(
    ("text", "gres", "node", "expected"),
    [
        ("     Nodes=n07 CPU_IDs=0-3 Mem=0 GRES_IDX=mlu(IDX:1)\n", "mlu", "n07", "1"),  # before Slurm 20.11
        ("     Nodes=n07 CPU_IDs=0-3 Mem=0 GRES=npu2:1(IDX:5),npu:2(IDX:3-4)\n", "npu", "n07", "3,4"),  # npu2 is not npu
        ("     Nodes=n07 CPU_IDs=0-3 Mem=0 GRES=gpu:a100:1(IDX:2),npu:1(IDX:0)\n", "npu", "n07", "0"),
    ],
)
def test_formats(text, gres, node, expected):
    assert indices(text, gres, node) == (0, expected)


@pytest.mark.parametrize(
    ("text", "gres", "node"),
    [
        (SLURM_22_05, "gpu", "vm"),  # the job holds no gpu
        (SLURM_22_05, "npu", "other"),  # not this node's job
        ("     Nodes=n07 CPU_IDs=0 Mem=0 GRES=npu:0(IDX:N/A)\n", "npu", "n07"),
        ("JobId=3 JobName=wrap\n   JobState=PENDING Reason=Resources\n", "npu", "n07"),
    ],
)
def test_no_allocation_is_a_failure_not_a_guess(text, gres, node):
    code, out = indices(text, gres, node)
    assert code != 0 and out == ""


@pytest.mark.slow
def test_hostlist_node_lines_are_expanded_with_scontrol(slurm):
    text = "     Nodes=n[01-03,07] CPU_IDs=0-7 Mem=0 GRES=mlu:370:2(IDX:0-1)\n     Nodes=n08 CPU_IDs=0-7 Mem=0 GRES=mlu:370:1(IDX:3)\n"
    assert indices(text, "mlu", "n02", slurm.env) == (0, "0,1")
    assert indices(text, "mlu", "n08", slurm.env) == (0, "3")
    assert indices(text, "mlu", "n04", slurm.env)[0] != 0
