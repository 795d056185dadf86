import torch
from torch.profiler import ProfilerActivity, profile


def trace(model, x):
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        with torch.cuda.nvtx.range("forward"):
            model(x)
        torch.cuda.nvtx.range_push("backward")
        model(x).sum().backward()
        torch.cuda.nvtx.range_pop()
    with torch.autograd.profiler.profile(use_cuda=True) as legacy:
        model(x)
    return prof, legacy
