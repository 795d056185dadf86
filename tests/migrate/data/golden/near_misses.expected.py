"""Mentions of CUDA that are not device code: comments, docstrings, paths, names, messages.

Call torch.cuda.synchronize() before timing; see https://pytorch.org/docs/cuda.html.
"""

import os

import torch

CHECKPOINT = "/ckpt/cuda_resnet50.pt"
EXPORT_DIR = os.path.join("exports", "cuda_cluster_v2")
cuda_graphs = False  # torch.cuda graphs are future work
use_cuda_kernels = True
MESSAGE = "this model was trained with torch.cuda on 8 GPUs"


def load(path=CHECKPOINT):
    """Load weights saved from a cuda device (see torch.cuda.amp notes)."""
    # torch.cuda.empty_cache() is not needed here
    return torch.load(path, map_location="cpu")


def describe(cuda_count=0):
    return f"{MESSAGE}; graphs={cuda_graphs}, kernels={use_cuda_kernels}, count={cuda_count}"
