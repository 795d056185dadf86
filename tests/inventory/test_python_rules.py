"""Every Python rule: a positive case that must be reported at the right line, and a near miss that must not.

Near misses put the same token where grep finds it but no device is involved:
comments, docstrings, file paths, messages, identifiers such as `cuda_graphs`.
"""

from __future__ import annotations

import pytest

from accelport import knowledge

# (rule, positive code, line of the finding, near-miss code)
CASES = [
    (
        "AP1001",
        'import torch\nx = torch.ones(2)\ny = x.to("cuda")\n',
        3,
        'import torch\n# x.to("cuda") moves it\nckpt = torch.load("/ckpt/cuda_resnet50.pt", map_location="cpu")\nprint("cuda")\n',
    ),
    (
        "AP1001",
        'import torch\nstate = torch.load("model.pt", map_location="cuda:0")\n',
        2,
        'import torch\nstate = torch.load("cuda/model.pt", map_location=None)\n',
    ),
    (
        "AP1001",
        'import torch\ndevice = "cuda"\nz = torch.zeros(3, device=device)\n',
        2,
        'import torch\nmessage = "use cuda"\nlabel = "cuda"  # a plot label, not a device: reported as AP1007 only\n',
    ),
    (
        "AP1002",
        'import torch\nrank = 0\ndev = torch.device(f"cuda:{rank}")\n',
        3,
        'import torch\nrank = 0\nprint(f"running on rank {rank}; cuda:{rank} is busy")\n',
    ),
    (
        "AP1002",
        'import torch\nrank = 1\nmodel = torch.nn.Linear(2, 2).to("cuda:" + str(rank))\n',
        3,
        'rank = 1\npath = "cuda_" + str(rank) + ".log"\n',
    ),
    (
        "AP1003",
        'import argparse\np = argparse.ArgumentParser()\np.add_argument("--device", default="cuda")\n',
        3,
        'import argparse\np = argparse.ArgumentParser()\np.add_argument("--log-dir", default="runs/cuda")\n',
    ),
    (
        "AP1003",
        'def train(model, device="cuda"):\n    return model\n',
        1,
        'def train(model, name="cuda_run"):\n    """Train on cuda (the docstring says so)."""\n    return model\n',
    ),
    (
        "AP1003",
        'from dataclasses import dataclass\n\n@dataclass\nclass Config:\n    device: str = "cuda"\n',
        5,
        'from dataclasses import dataclass\n\n@dataclass\nclass Config:\n    cuda_graphs: bool = False\n',
    ),
    (
        "AP1004",
        "import torch\nmodel = torch.nn.Linear(4, 4).cuda()\n",
        2,
        "import torch\ncuda_graphs = False\nmodel = torch.nn.Linear(4, 4)  # model.cuda() later\n",
    ),
    (
        "AP1005",
        "import torch\nx = torch.ones(1)\nassert x.is_cuda\n",
        3,
        'import torch\nx = torch.ones(1)\n"""x.is_cuda is checked elsewhere"""\n',
    ),
    (
        "AP1006",
        'import torch\nx = torch.ones(1)\nif x.device.type == "cuda":\n    pass\n',
        3,
        'import torch\nx = torch.ones(1)\nif x.device.type == "cpu":  # not "cuda"\n    pass\n',
    ),
    (
        "AP1006",
        'device = "x"\nif str(device).startswith("cuda"):\n    pass\n',
        2,
        'path = "x"\nif path.startswith("cuda_logs"):\n    pass\n',
    ),
    (
        "AP1007",
        'BACKENDS = {"cuda": "gloo", "cpu": "gloo"}\n',
        1,
        'NAMES = {"cuda_graphs": 1, "cpu": 2}\n',
    ),
    (
        "AP1101",
        "import torch\nok = torch.cuda.is_available()\n",
        2,
        "import torch\n# torch.cuda.is_available() is False here\nok = torch.accelerator.is_available()\n",
    ),
    (
        "AP1102",
        "import torch\ntorch.cuda.set_device(0)\n",
        2,
        'import torch\ndoc = "call torch.cuda.set_device(0) first"\n',
    ),
    (
        "AP1103",
        "from torch import cuda as tc\ntc.synchronize()\n",
        2,
        "import torch\ndef synchronize():\n    pass\nsynchronize()\n",
    ),
    (
        "AP1104",
        "import torch\npeak = torch.cuda.max_memory_allocated()\n",
        2,
        "import torch\n'''torch.cuda.max_memory_allocated() returns 0 on CPU builds'''\npeak = 0\n",
    ),
    (
        "AP1105",
        "import torch\nstart = torch.cuda.Event(enable_timing=True)\n",
        2,
        "import torch\nstart = torch.Event('cpu')  # torch.cuda.Event would fail\n",
    ),
    (
        "AP1106",
        "import torch.cuda\ntorch.cuda.manual_seed_all(0)\n",
        2,
        "import torch\ntorch.manual_seed(0)\n",
    ),
    (
        "AP1107",
        "import torch\nstate = torch.cuda.get_rng_state()\n",
        2,
        "import torch\nstate = torch.get_rng_state()\n",
    ),
    (
        "AP1108",
        "import torch\nname = torch.cuda.get_device_name(0)\n",
        2,
        'import torch\nname = "torch.cuda.get_device_name"\n',
    ),
    (
        "AP1109",
        "import torch\nmajor, minor = torch.cuda.get_device_capability()\n",
        2,
        "import torch\nmajor, minor = (8, 0)  # torch.cuda.get_device_capability()\n",
    ),
    (
        "AP1110",
        "import torch\ng = torch.cuda.CUDAGraph()\n",
        2,
        "cuda_graphs = True\nuse_graph = cuda_graphs\n",
    ),
    (
        "AP1111",
        "import torch\ntorch.cuda.set_per_process_memory_fraction(0.5)\n",
        2,
        "fraction = 0.5  # torch.cuda.set_per_process_memory_fraction\n",
    ),
    (
        "AP1112",
        "import torch\nx = torch.cuda.FloatTensor(2, 2)\n",
        2,
        "import torch\nx = torch.FloatTensor(2, 2)\n",
    ),
    (
        "AP1113",
        "import torch\ntorch.cuda.set_sync_debug_mode(1)\n",
        2,
        "import torch\ntorch.set_printoptions(precision=2)\n",
    ),
    (
        "AP1114",
        "import torch\ntry:\n    pass\nexcept torch.cuda.OutOfMemoryError:\n    pass\n",
        4,
        "import torch\ntry:\n    pass\nexcept torch.OutOfMemoryError:\n    pass\n",
    ),
    (
        "AP1201",
        "from torch.cuda.amp import autocast\nwith autocast():\n    pass\n",
        1,
        "import torch\nwith torch.autocast('cpu'):\n    pass\n",
    ),
    (
        "AP1201",
        "import torch\nwith torch.cuda.amp.autocast():\n    pass\n",
        2,
        "import torch\nwith torch.amp.autocast('cpu'):\n    pass\n",
    ),
    (
        "AP1202",
        "import torch\nscaler = torch.amp.GradScaler()\n",
        2,
        "import torch\nscaler = torch.amp.GradScaler('cpu')\n",
    ),
    (
        "AP1202",
        "import torch\nscaler = torch.cuda.amp.GradScaler(enabled=True)\n",
        2,
        "import torch\nscaler = torch.amp.GradScaler(device='cpu', enabled=True)\n",
    ),
    (
        "AP1203",
        "import torch\n@torch.cuda.amp.custom_fwd\ndef f(x):\n    return x\n",
        2,
        "import torch\n@torch.amp.custom_fwd(device_type='cpu')\ndef f(x):\n    return x\n",
    ),
    (
        "AP1301",
        'import torch.distributed as dist\ndist.init_process_group(backend="nccl")\n',
        2,
        'import torch.distributed as dist\ndist.init_process_group(backend="gloo")  # nccl on GPUs\n',
    ),
    (
        "AP1301",
        'import torch.distributed as dist\ndist.init_process_group("nccl", rank=0, world_size=1)\n',
        2,
        'import torch.distributed as dist\nlog = "nccl_debug.txt"\n',
    ),
    (
        "AP1302",
        "import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\nm = DDP(torch.nn.Linear(2, 2), device_ids=[0])\n",
        3,
        "import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\nm = DDP(torch.nn.Linear(2, 2))\n",
    ),
    (
        "AP1302",
        "import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\nm = DDP(\n    torch.nn.Linear(2, 2),\n    output_device=0,\n)\n",
        5,
        'import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\nm = DDP(torch.nn.Linear(2, 2), output_device=0 if d.type != "cpu" else None)\n',
    ),
    (
        "AP1303",
        "import torch.nn as nn\nm = nn.DataParallel(nn.Linear(2, 2))\n",
        2,
        'import torch.nn as nn\nnote = "nn.DataParallel is not used here"\n',
    ),
    (
        "AP1401",
        "import torch\ntorch.backends.cuda.matmul.allow_tf32 = True\n",
        2,
        "import torch\ntorch.set_float32_matmul_precision('high')  # was torch.backends.cuda.matmul.allow_tf32\n",
    ),
    (
        "AP1402",
        "import torch\ntorch.backends.cudnn.deterministic = True\n",
        2,
        "import torch\ntorch.use_deterministic_algorithms(True)\n",
    ),
    (
        "AP1403",
        "from torch.backends import cudnn\ncudnn.benchmark = True\n",
        2,
        "benchmark = True  # cudnn.benchmark\n",
    ),
    (
        "AP1404",
        "import torch\ntorch.backends.cuda.enable_flash_sdp(True)\n",
        2,
        "import torch\nflash = True  # torch.backends.cuda.enable_flash_sdp\n",
    ),
    (
        "AP1501",
        "from torch.profiler import ProfilerActivity, profile\nprof = profile(activities=[ProfilerActivity.CUDA])\n",
        2,
        "from torch.profiler import ProfilerActivity, profile\nprof = profile(activities=[ProfilerActivity.CPU])\n",
    ),
    (
        "AP1502",
        'import torch\nwith torch.cuda.nvtx.range("fwd"):\n    pass\n',
        2,
        'import torch\nwith torch.profiler.record_function("nvtx fwd"):\n    pass\n',
    ),
    (
        "AP1503",
        "import torch\ntorch.cuda.profiler.start()\n",
        2,
        "import torch\nstart = 0  # torch.cuda.profiler.start()\n",
    ),
    (
        "AP1601",
        'import os\nos.environ["CUDA_VISIBLE_DEVICES"] = "0"\n',
        2,
        'import os\nprint("set CUDA_VISIBLE_DEVICES=0 first")\n',
    ),
    (
        "AP1602",
        'import os\nos.environ.setdefault("NCCL_DEBUG", "INFO")\n',
        2,
        'import os\n# export NCCL_DEBUG=INFO\nos.environ.setdefault("LOG_LEVEL", "INFO")\n',
    ),
    (
        "AP1603",
        'import os\nos.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"\n',
        2,
        'import os\nos.environ["PYTORCH_ALLOC_NOTE"] = "see PYTORCH_CUDA_ALLOC_CONF docs"\n',
    ),
    (
        "AP1604",
        "import torch\nprint(torch.version.cuda)\n",
        2,
        "import torch\nprint(torch.__version__)  # torch.version.cuda\n",
    ),
    (
        "AP1605",
        "import torch\nfrom torch.utils.data import DataLoader\nloader = DataLoader([], pin_memory=True)\n",
        3,
        "import torch\nfrom torch.utils.data import DataLoader\nloader = DataLoader([], pin_memory=False)\n",
    ),
    (
        "AP6001",
        "from torch.utils.cpp_extension import CUDAExtension\next = CUDAExtension('k', ['k.cu'])\n",
        2,
        "from torch.utils.cpp_extension import CppExtension\next = CppExtension('k', ['k.cpp'])  # not a CUDAExtension\n",
    ),
    (
        "AP6001",
        "from torch.utils.cpp_extension import load\nmod = load(name='k', sources=['k.cpp', 'k_kernel.cu'])\n",
        2,
        "from torch.utils.cpp_extension import load\nmod = load(name='k', sources=['k.cpp'])\n",
    ),
    (
        "AP6002",
        "from torch.utils.cpp_extension import CUDA_HOME\nprint(CUDA_HOME)\n",
        1,
        "import os\nhome = os.environ.get('HOME')  # CUDA_HOME is unset here\n",
    ),
    (
        "AP8001",
        "from flash_attn import flash_attn_func\n",
        1,
        '# from flash_attn import flash_attn_func\nname = "flash_attn"\n',
    ),
    (
        "AP8001",
        "import numba\n\n@numba.cuda.jit\ndef k(x):\n    pass\n",
        3,
        "import numba\n\n@numba.njit\ndef k(x):\n    pass\n",
    ),
    (
        "AP9001",
        'import torch.distributed as dist\nif dist.get_backend() == "nccl":\n    pass\n',
        2,
        'import torch.distributed as dist\nif dist.get_backend() == "gloo":\n    pass\n',
    ),
    (
        "AP9002",
        'import torch\ndevice = "cuda" if torch.cuda.is_available() else "cpu"\n',
        2,
        'import torch\ndevice = "npu" if torch.accelerator.is_available() else "cpu"\n',
    ),
]


def _python_rules() -> set[str]:
    return {
        r.id
        for r in knowledge.rules().values()
        # AP19xx are the C++ ATen rules, tested in test_cxx.py.
        if (r.id[2] == "1" and not r.id.startswith("AP19")) or r.id in {"AP6001", "AP6002", "AP8001", "AP9001", "AP9002"}
    }


def test_every_python_rule_has_a_case():
    assert _python_rules() <= {case[0] for case in CASES}


@pytest.mark.parametrize(("rule", "positive", "line", "near_miss"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_rule_positive_and_near_miss(scan_code, rule, positive, line, near_miss):
    found = scan_code(positive)
    assert (rule, line) in {(r, ln) for r, ln, _ in found}, found
    missed = scan_code(near_miss)
    assert rule not in {r for r, _, _ in missed}, missed


def test_near_miss_label_string_is_only_an_unknown_position(scan_code):
    # `label = "cuda"` is not a device variable, but the exact string still deserves review.
    found = scan_code('label = "cuda"\n')
    assert [r for r, _, _ in found] == ["AP1007"]


def test_aliases_resolve(scan_code):
    code = """
    import torch as th
    import torch.cuda
    from torch import cuda as tc
    from torch.cuda.amp import autocast as ac, GradScaler
    th.cuda.synchronize()
    torch.cuda.empty_cache()
    tc.memory_allocated()
    with ac():
        pass
    scaler = GradScaler()
    """
    found = {(r, ln) for r, ln, _ in scan_code(code)}
    assert {("AP1103", 6), ("AP1104", 7), ("AP1104", 8), ("AP1201", 9), ("AP1202", 11)} <= found
    # the imports of CUDA names are reported where they are imported too
    assert ("AP1201", 5) in found and ("AP1202", 5) in found


def test_comment_docstring_and_path_are_never_reported(scan_code):
    code = '''
    """Training on torch.cuda with nccl; see cudaMalloc docs."""
    import torch

    def save(model):
        """Save to /ckpt/cuda_resnet50.pt (path mentions cuda)."""
        # torch.cuda.synchronize() is not needed here; nccl neither
        torch.save(model, "/ckpt/cuda_resnet50.pt")
        cuda_graphs = False
        return cuda_graphs
    '''
    assert scan_code(code) == []


def test_columns_count_characters_not_bytes(scan_code, tmp_path):
    from accelport.inventory import scan

    path = tmp_path / "u.py"
    path.write_text('import torch\nnote = "é"; x = torch.ones(1).to("cuda")\n', encoding="utf-8")
    finding = next(f for f in scan([str(path)], jobs=1).findings if f.rule_id == "AP1001")
    line = path.read_text().splitlines()[1]
    assert line[finding.location.column - 1 : finding.location.end_column - 1] == '"cuda"'
