import torch

import _accelport_compat

DEVICE = torch.accelerator.current_accelerator() or torch.device("cpu")


def setup(local_rank):
    if torch.accelerator.is_available() and torch.accelerator.device_count() > 1:
        torch.accelerator.set_device_index(local_rank)
    index = torch.accelerator.current_device_index() if torch.accelerator.is_available() else 0
    if torch.accelerator.is_available():
        getattr(torch.get_device_module(DEVICE), "manual_seed_all", torch.manual_seed)(0)
        torch.get_device_module(DEVICE).manual_seed(1)
    return index


def seed_everything(seed):
    torch.manual_seed(seed)


def seed_gpus_then_all(seed):
    torch.manual_seed(seed)


def report():
    if torch.accelerator.is_available():
        torch.accelerator.synchronize()
        return torch.accelerator.memory_allocated()
    return torch.accelerator.max_memory_allocated() if torch.accelerator.is_available() else 0


def step(model, x):
    stream = torch.Stream(DEVICE)
    with stream:
        y = model(x)
    _accelport_compat.current_stream().wait_stream(stream)
    with torch.accelerator.device_index(0 if torch.accelerator.is_available() else None):
        y = y + 1
    if torch.accelerator.is_available():
        torch.accelerator.synchronize()  # wait for the kernels
        torch.accelerator.empty_cache()
    free, total = torch.accelerator.get_memory_info() if torch.accelerator.is_available() else (0, 0)
    peak = (torch.accelerator.max_memory_allocated() if torch.accelerator.is_available() else 0) / 2**30
    if torch.accelerator.is_available():
        torch.accelerator.reset_peak_memory_stats()
    return y, free, total, peak


def timing():
    start = _accelport_compat.Event(DEVICE, enable_timing=True)
    end = _accelport_compat.Event(DEVICE, enable_timing=True)
    start.record()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def rng():
    state = getattr(torch.get_device_module(DEVICE), "get_rng_state", torch.get_rng_state)()
    getattr(torch.get_device_module(DEVICE), "set_rng_state", torch.set_rng_state)(state)
    name = getattr(torch.get_device_module(DEVICE), "get_device_name", lambda *args: DEVICE.type)(0)
    bf16 = _accelport_compat.is_bf16_supported(DEVICE) if torch.accelerator.is_available() else False
    return name, bf16


def guarded(model, x):
    try:
        return model(x)
    except torch.OutOfMemoryError:
        torch.accelerator.empty_cache() if torch.accelerator.is_available() else None; return None
