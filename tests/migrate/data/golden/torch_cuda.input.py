import torch


def setup(local_rank):
    if torch.cuda.is_available() and torch.cuda.device_count() > 1:
        torch.cuda.set_device(local_rank)
    index = torch.cuda.current_device()
    torch.cuda.manual_seed_all(0)
    torch.cuda.manual_seed(1)
    return index


def seed_everything(seed):
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)


def seed_gpus_then_all(seed):
    torch.cuda.manual_seed_all(seed)
    torch.manual_seed(seed)


def report():
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        return torch.cuda.memory_allocated()
    return torch.cuda.max_memory_allocated() if torch.cuda.is_available() else 0


def step(model, x):
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        y = model(x)
    torch.cuda.current_stream().wait_stream(stream)
    with torch.cuda.device(0):
        y = y + 1
    torch.cuda.synchronize()  # wait for the kernels
    torch.cuda.empty_cache()
    free, total = torch.cuda.mem_get_info()
    peak = torch.cuda.max_memory_allocated() / 2**30
    torch.cuda.reset_peak_memory_stats()
    return y, free, total, peak


def timing():
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def rng():
    state = torch.cuda.get_rng_state()
    torch.cuda.set_rng_state(state)
    name = torch.cuda.get_device_name(0)
    bf16 = torch.cuda.is_bf16_supported()
    return name, bf16


def guarded(model, x):
    try:
        return model(x)
    except torch.cuda.OutOfMemoryError:
        torch.cuda.empty_cache(); return None
