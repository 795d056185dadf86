import torch


def configure(deterministic, tf32):
    torch.backends.cudnn.benchmark = not deterministic  # accelport: AP1403: CUDA-only autotuning; harmless elsewhere, tune the target separately
    torch.use_deterministic_algorithms(deterministic, warn_only=True)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    torch.backends.cudnn.allow_tf32 = False  # accelport: AP1401: cuDNN convolutions only, harmless elsewhere: keep it (set_float32_matmul_precision governs matmuls, not convolutions)
    if torch.are_deterministic_algorithms_enabled():
        print("deterministic")
    return torch.get_float32_matmul_precision() != "highest"
