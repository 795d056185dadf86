import torch
from torch.profiler import ProfilerActivity, profile

DEVICE = torch.accelerator.current_accelerator() or torch.device("cpu")


def trace(model, x):
    with profile(activities=torch.profiler.supported_activities()) as prof:
        with torch.profiler.record_function("forward"):
            model(x)
        torch.cuda.nvtx.range_push("backward")  # accelport: AP1502: use torch.profiler.record_function(name) as a context manager
        model(x).sum().backward()
        torch.cuda.nvtx.range_pop()  # accelport: AP1502: use torch.profiler.record_function(name) as a context manager
    with torch.autograd.profiler.profile(use_device=DEVICE.type if DEVICE.type != "cpu" else None) as legacy:
        model(x)
    return prof, legacy
