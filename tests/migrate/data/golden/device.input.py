"""Device selection the CUDA way. The checkpoint lives at /ckpt/cuda_resnet50.pt."""

import argparse
from dataclasses import dataclass

import torch

CHECKPOINT = "/ckpt/cuda_resnet50.pt"  # a path, not a device


@dataclass
class Config:
    device: str = "cuda"
    lr: float = 1e-3


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda", help="cuda, cuda:1 or cpu")
    return parser.parse_args()


def to_device(batch, rank):
    # Moves the batch to torch.cuda memory.
    x = batch.cuda()
    y = batch.cuda(rank, non_blocking=True)
    z = batch.to("cuda:1")
    w = torch.zeros(3, device="cuda")
    return x, y, z, w


def per_rank(local_rank):
    device = torch.device(f"cuda:{local_rank}")
    model = torch.nn.Linear(2, 2).cuda()
    state = torch.load(CHECKPOINT, map_location={"cuda:0": "cuda"})
    rank_device = "cuda:%d" % local_rank
    other_device = "cuda:{}".format(local_rank)
    indexed = torch.device("cuda", local_rank)
    return device, model, state, rank_device, other_device, indexed


def checks(x, device):
    cuda_graphs = False
    assert x.is_cuda, "expected a GPU tensor"
    if x.device.type == "cuda" and not cuda_graphs:
        pass
    if not x.device.type != "cuda":
        pass
    on_gpu = str(device).startswith("cuda")
    return on_gpu


def pick():
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.ones(1).to(device)
