import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def options():
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="nccl")
    return parser.parse_args()


def init(model, local_rank):
    dist.init_process_group(backend="nccl", init_method="env://")
    torch.cuda.set_device(local_rank)
    model = DDP(model.cuda(), device_ids=[local_rank], output_device=local_rank)
    if dist.get_backend() == "nccl":
        os.environ["NCCL_DEBUG"] = "INFO"
    return model


def init_positional():
    dist.init_process_group("nccl")


def wrap_current(model):
    return DDP(model, device_ids=[torch.cuda.current_device()], output_device=torch.cuda.current_device())
