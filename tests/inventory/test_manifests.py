"""Dependency manifests: requirements files, pyproject.toml, setup.cfg, conda environment files."""

from __future__ import annotations

import pytest

from accelport.findings import BackendStatus, Category
from accelport.inventory.base import ScanSkipped, SourceFile
from accelport.inventory.manifests import ManifestScanner


def scan(name: str, text: str):
    return ManifestScanner().scan(SourceFile(name, text.encode()))


def rules(name: str, text: str) -> list[tuple[str, str, int]]:
    return sorted((f.rule_id, f.symbol, f.location.line) for f in scan(name, text))


REQUIREMENTS = """\
# nvidia-cublas-cu12 is pulled in by torch; flash-attn is optional (comment)
--extra-index-url https://download.pytorch.org/whl/cu121
torch==2.5.1+cu121
nvidia-cublas-cu12==12.4.5.8 \\
    --hash=sha256:0f8aa4c5
cupy-cuda12x>=13
flash-attn==2.6.3  # attention kernels
numpy>=1.26
jax[cuda12]==0.4.30
-r base.txt
https://download.pytorch.org/whl/cu121/torchvision-0.20.1%2Bcu121-cp311-cp311-linux_x86_64.whl
"""


def test_requirements_file():
    assert rules("requirements-gpu.txt", REQUIREMENTS) == [
        ("AP8101", "nvidia-cublas-cu12", 4),
        ("AP8102", "https://download.pytorch.org/whl/cu121/torchvision-0.20.1%2Bcu121-cp311-cp311-linux_x86_64.whl", 11),
        ("AP8102", "jax[cuda12]==0.4.30", 9),
        ("AP8102", "torch==2.5.1+cu121", 3),
        ("AP8103", "https://download.pytorch.org/whl/cu121", 2),
        ("AP8104", "cupy-cuda12x", 6),
        ("AP8104", "flash-attn", 7),
    ]


def test_cuda_only_package_carries_per_vendor_alternatives():
    [finding] = [f for f in scan("requirements.txt", "flash-attn==2.6.3\n") if f.rule_id == "AP8104"]
    assert finding.category is Category.DEPENDENCY
    assert finding.replacement == "torch.nn.functional.scaled_dot_product_attention"
    assert finding.backends["npu"] is BackendStatus.ALTERNATIVE
    assert "npu: torch_npu.npu_fusion_attention" in finding.message


def test_plain_requirements_have_no_findings():
    assert rules("requirements.txt", "torch==2.5.1\nnumpy\n# torch==2.5.1+cu121 (old pin)\npytest-cuda-marker-docs\n") == []


def test_pyproject_dependencies_extras_and_indexes():
    text = """\
[project]
name = "x"
dependencies = ["torch>=2.4", "nvidia-nccl-cu12"]
[project.optional-dependencies]
fast = ["xformers>=0.0.28"]
[[tool.uv.index]]
name = "pytorch-cu124"
url = "https://download.pytorch.org/whl/cu124"
"""
    assert rules("pyproject.toml", text) == [
        ("AP8101", "nvidia-nccl-cu12", 3),
        ("AP8103", "https://download.pytorch.org/whl/cu124", 8),
        ("AP8104", "xformers", 5),
    ]
    with pytest.raises(ScanSkipped, match="TOML"):
        scan("pyproject.toml", "[project\ndependencies = [")


def test_setup_cfg_install_requires():
    text = "[metadata]\nname = x\n[options]\ninstall_requires =\n    torch\n    bitsandbytes>=0.43\n[options.extras_require]\ngpu = cupy-cuda11x\nxla = jax[cuda12]\n"
    assert rules("setup.cfg", text) == [("AP8102", "jax[cuda12]", 9), ("AP8104", "bitsandbytes", 6), ("AP8104", "cupy-cuda11x", 8)]


def test_conda_environment():
    text = """\
name: train
channels:
  - pytorch
  - nvidia   # CUDA toolkit packages
dependencies:
  - python=3.11
  - pytorch=2.1.0
  - pytorch-cuda=12.1
  - cudatoolkit=11.8
  - numpy
  - pip:
      - flash-attn==2.5.0
      - nvidia-cudnn-cu12
# - cuda-nvcc (commented out)
"""
    assert rules("environment.yml", text) == [
        ("AP6107", "cudatoolkit=11.8", 9),
        ("AP6107", "nvidia", 4),
        ("AP6107", "pytorch-cuda=12.1", 8),
        ("AP8101", "nvidia-cudnn-cu12", 13),
        ("AP8104", "flash-attn", 12),
    ]
    with pytest.raises(ScanSkipped, match="YAML"):
        scan("environment.yml", "dependencies: [cuda\n  - : :")
