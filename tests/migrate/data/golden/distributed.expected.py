import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

DEVICE = torch.accelerator.current_accelerator() or torch.device("cpu")


def options():
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default=dist.get_default_backend_for_device(DEVICE))
    return parser.parse_args()


def init(model, local_rank):
    dist.init_process_group(backend=dist.get_default_backend_for_device(DEVICE), init_method="env://")
    if torch.accelerator.is_available():
        torch.accelerator.set_device_index(local_rank)
    model = DDP(model.to(DEVICE), device_ids=[local_rank] if DEVICE.type != "cpu" else None, output_device=local_rank if DEVICE.type != "cpu" else None)
    if dist.get_backend() == "nccl":  # accelport: AP9001: NCCL is NVIDIA's; test for the capability needed, or name the target's collective library
        os.environ["NCCL_DEBUG"] = "INFO"  # accelport: AP1602: NCCL setting; also set the target collective library's variable
    return model


def init_positional():
    dist.init_process_group(dist.get_default_backend_for_device(DEVICE))


def wrap_current(model):
    return DDP(model, device_ids=[torch.accelerator.current_device_index() if torch.accelerator.is_available() else 0] if DEVICE.type != "cpu" else None, output_device=(torch.accelerator.current_device_index() if torch.accelerator.is_available() else 0) if DEVICE.type != "cpu" else None)
