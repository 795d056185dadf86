"""Names imported from torch.cuda, and torch under another name."""
import torch as th
from torch import amp

DEVICE = th.accelerator.current_accelerator() or th.device("cpu")


def step(model, x):
    with amp.autocast(DEVICE.type, enabled=DEVICE.type != "cpu"):
        y = model(x)
    with th.profiler.record_function("sync"):
        if th.accelerator.is_available():
            th.accelerator.synchronize()
    if th.accelerator.is_available():
        th.accelerator.empty_cache()
    return y.to(DEVICE)
