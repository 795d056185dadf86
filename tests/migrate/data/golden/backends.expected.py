import torch


def configure(deterministic, tf32):
    torch.backends.cudnn.benchmark = not deterministic  # accelport: AP1403: CUDA-only autotuning; harmless elsewhere, tune the target separately
    torch.use_deterministic_algorithms(deterministic, warn_only=True)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    torch.set_float32_matmul_precision("highest")
    if torch.are_deterministic_algorithms_enabled():
        print("deterministic")
    return torch.get_float32_matmul_precision() != "highest"
