"""Helpers for train.py: seeding, CUDA-event timing, memory logging, device report.

These assume an NVIDIA GPU: cudaMalloc-backed caching allocator stats, CUDA events.
"""

import os
import random

import torch


def seed_everything(seed):
    random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)


class CudaTimer:
    """Times GPU work with CUDA events; a wall clock would miss asynchronous kernels."""

    def __init__(self):
        self.start_event = torch.cuda.Event(enable_timing=True)
        self.end_event = torch.cuda.Event(enable_timing=True)

    def start(self):
        self.start_event.record()

    def stop(self):
        self.end_event.record()
        torch.cuda.synchronize()
        return self.start_event.elapsed_time(self.end_event)


def log_memory(prefix=""):
    allocated = torch.cuda.memory_allocated() / 2**20
    peak = torch.cuda.max_memory_allocated() / 2**20
    reserved = torch.cuda.memory_reserved() / 2**20
    print(f"{prefix}memory: allocated={allocated:.1f} MiB peak={peak:.1f} MiB reserved={reserved:.1f} MiB")


def describe_device():
    # Only meaningful on a GPU; torch.cuda raises on a CPU-only build.
    if torch.cuda.is_available():
        name = torch.cuda.get_device_name(0)
        major, minor = torch.cuda.get_device_capability(0)
        print(f"GPU: {name} (sm_{major}{minor}), CUDA {torch.version.cuda}")
    print(f"visible GPUs: {os.environ.get('CUDA_VISIBLE_DEVICES', 'all')}")
