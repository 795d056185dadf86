"""Device selection the CUDA way. The checkpoint lives at /ckpt/cuda_resnet50.pt."""

import argparse
from dataclasses import dataclass

import torch

DEVICE = torch.accelerator.current_accelerator() or torch.device("cpu")

CHECKPOINT = "/ckpt/cuda_resnet50.pt"  # a path, not a device


@dataclass
class Config:
    device: str = DEVICE.type
    lr: float = 1e-3


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default=DEVICE.type, help="cuda, cuda:1 or cpu")
    return parser.parse_args()


def to_device(batch, rank):
    # Moves the batch to torch.cuda memory.
    x = batch.to(DEVICE)
    y = batch.to(torch.device(DEVICE.type, rank), non_blocking=True)
    z = batch.to(torch.device(DEVICE.type, 1))
    w = torch.zeros(3, device=DEVICE)
    return x, y, z, w


def per_rank(local_rank):
    device = torch.device(DEVICE.type, local_rank)
    model = torch.nn.Linear(2, 2).to(device)
    state = torch.load(CHECKPOINT, map_location={"cuda:0": device.type})
    rank_device = f"{device.type}:%d" % local_rank
    other_device = "{}:{}".format(device.type, local_rank)
    indexed = torch.device(device.type, local_rank)
    return device, model, state, rank_device, other_device, indexed


def checks(x, device):
    cuda_graphs = False
    assert x.device.type == DEVICE.type, "expected a GPU tensor"
    if x.device.type == DEVICE.type and DEVICE.type != "cpu" and not cuda_graphs:
        pass
    if not (x.device.type != DEVICE.type or DEVICE.type == "cpu"):
        pass
    on_gpu = str(device).startswith(DEVICE.type) and DEVICE.type != "cpu"
    return on_gpu


def pick():
    device = DEVICE.type
    return torch.ones(1).to(device)
