"""Rewrites keep the program's meaning: conditional devices, pinning, guards, cuDNN flags (issue 20)."""

from __future__ import annotations

import ast
import textwrap

import pytest

from accelport.migrate import migrate_source


def migrated(source: str) -> str:
    result = migrate_source(textwrap.dedent(source), "case.py")
    assert result.error is None
    ast.parse(result.migrated)
    return result.migrated


def body(text: str) -> str:
    """The migrated text after the imports and the module's device definition."""
    rest = text.strip().split("\n\n", 1)[1].strip()
    if rest.startswith("DEVICE = torch.accelerator.current_accelerator() or torch.device("):
        rest = rest.split("\n", 1)[1].strip()
    return rest


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('d = "cuda" if torch.cuda.is_available() else "cpu"', "d = DEVICE.type"),
        ('d = "cpu" if not torch.cuda.is_available() else "cuda"', "d = DEVICE.type"),
        ('d = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")', "d = DEVICE"),
        ('d = torch.device("cuda" if torch.cuda.is_available() else "cpu")', "d = torch.device(DEVICE.type)"),
        ('h = lambda: "cuda" if torch.cuda.is_available() else "cpu"', "h = lambda: DEVICE.type"),
        ('t = ("cuda" if torch.cuda.is_available() else "cpu", 1)', "t = (DEVICE.type, 1)"),
        ("print(f\"{'cuda' if torch.cuda.is_available() else 'cpu'}\")", 'print(f"{DEVICE.type}")'),
        ('print((d := "cuda" if torch.cuda.is_available() else "cpu"))', "print((d := DEVICE.type))"),
        (
            'k = "cuda:0" if torch.cuda.is_available() else "cpu"',
            'k = f"{DEVICE.type}:0" if torch.accelerator.is_available() else "cpu"',
        ),
        (
            'k = "cpu" if not torch.cuda.is_available() else f"cuda:{rank}"',
            'k = "cpu" if not torch.accelerator.is_available() else f"{DEVICE.type}:{rank}"',
        ),
    ],
)
def test_conditional_device_is_never_collapsed_to_cuda(line, expected):
    text = migrated(f"import torch\n\nrank = 1\n{line}\n")
    assert body(text) == f"rank = 1\n{expected}"


def test_conditional_device_in_defaults_and_returns():
    text = migrated(
        """
        import torch


        def pick(x="cuda" if torch.cuda.is_available() else "cpu"):
            return "cuda" if torch.cuda.is_available() else "cpu"
        """
    )
    assert body(text) == "def pick(x=DEVICE.type):\n    return DEVICE.type"


def test_fallback_conditional_is_parenthesised_where_precedence_needs_it():
    text = migrated("import torch\n\nxs = [1 for _ in range(2) if torch.cuda.current_device()]\n")
    assert "if (torch.accelerator.current_device_index() if torch.accelerator.is_available() else 0)]" in text
    text = migrated("import torch\n\nxs = [i for i in range(torch.cuda.current_device())]\n")
    ast.parse(text)


def test_pinning_only_with_an_accelerator():
    text = migrated(
        """
        import torch

        x = torch.ones(2).pin_memory()
        y = [t.pin_memory() for t in [x]][0].sum()
        z = x.pin_memory().float()
        loader = torch.utils.data.DataLoader([1], pin_memory=True)
        """
    )
    assert body(text) == textwrap.dedent(
        """\
        x = torch.ones(2).pin_memory() if torch.accelerator.is_available() else torch.ones(2)
        y = [t.pin_memory() if torch.accelerator.is_available() else t for t in [x]][0].sum()
        z = (x.pin_memory() if torch.accelerator.is_available() else x).float()
        loader = torch.utils.data.DataLoader([1], pin_memory=torch.accelerator.is_available())"""
    )
    namespace: dict = {}
    exec(compile(text, "case.py", "exec"), namespace)  # runs on this CPU machine
    assert namespace["z"].tolist() == [1.0, 1.0]


def test_pinning_already_guarded_is_left_alone(findings_in):
    source = "import torch\n\nx = torch.ones(2)\nif torch.accelerator.is_available():\n    x = x.pin_memory()\n"
    assert [f.rule_id for f in findings_in(source)] == []


def test_adjacent_guarded_calls_share_one_guard():
    text = migrated(
        """
        import torch


        def tidy():
            torch.cuda.synchronize()
            torch.cuda.empty_cache()

            torch.cuda.reset_peak_memory_stats()
        """
    )
    assert text.count("if torch.accelerator.is_available():") == 2
    assert (
        "    if torch.accelerator.is_available():\n"
        "        torch.accelerator.synchronize()\n"
        "        torch.accelerator.empty_cache()\n\n"
        "    if torch.accelerator.is_available():\n"
        "        torch.accelerator.reset_peak_memory_stats()\n"
    ) in text


def test_cudnn_deterministic_is_kept_not_broadened():
    text = migrated("import torch\n\ntorch.backends.cudnn.deterministic = False\n")
    assert "use_deterministic_algorithms" not in text.split("#")[0]
    assert text.startswith("import torch\n\ntorch.backends.cudnn.deterministic = False  # accelport: AP1402:")


def test_index_moves_cuda_with_a_device_and_indexed_fstrings():
    text = migrated(
        """
        import os

        import torch

        gpu_id = int(os.environ.get("LOCAL_RANK", "0"))
        model = torch.nn.Linear(2, 2).to(gpu_id)
        loc = f"cuda:{gpu_id}"


        def place(x, device):
            return x.cuda(device)
        """
    )
    assert text.split('torch.device("cpu")\n\n')[1] == textwrap.dedent(
        """\
        gpu_id = int(os.environ.get("LOCAL_RANK", "0"))
        model = torch.nn.Linear(2, 2).to(torch.device(DEVICE.type, gpu_id))
        loc = f"{DEVICE.type}:{gpu_id}"


        def place(x, device):
            return x.to(device)
        """
    )


def test_nccl_in_the_accelerator_branch_is_the_default_backend():
    text = migrated('import torch\nimport torch.distributed as dist\n\nb = "nccl" if torch.cuda.is_available() else "gloo"\n')
    assert body(text) == 'b = dist.get_default_backend_for_device(DEVICE) if torch.accelerator.is_available() else "gloo"'


def test_a_cudnn_import_alias_is_no_finding(findings_in):
    assert findings_in("import torch.backends.cudnn as cudnn\n\ncudnn.benchmark = True\n")[0].location.line == 3
    assert len(findings_in("import torch.backends.cudnn as cudnn\n\ncudnn.benchmark = True\n")) == 1
