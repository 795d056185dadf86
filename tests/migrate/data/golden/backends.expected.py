import torch


def configure(deterministic, tf32):
    torch.backends.cudnn.benchmark = not deterministic  # accelport: AP1403: CUDA-only autotuning; harmless elsewhere, tune the target separately
    torch.backends.cudnn.deterministic = deterministic  # accelport: AP1402: cuDNN-only switch, kept (harmless elsewhere); add torch.use_deterministic_algorithms(True) if other backends must be deterministic too
    torch.backends.cudnn.deterministic = True  # accelport: AP1402: cuDNN-only switch, kept (harmless elsewhere); add torch.use_deterministic_algorithms(True) if other backends must be deterministic too
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    torch.backends.cudnn.allow_tf32 = False  # accelport: AP1401: cuDNN convolutions only, harmless elsewhere: keep it (set_float32_matmul_precision governs matmuls, not convolutions)
    if torch.backends.cudnn.deterministic:  # accelport: AP1402: cuDNN-only switch, kept (harmless elsewhere); add torch.use_deterministic_algorithms(True) if other backends must be deterministic too
        print("deterministic")
    return torch.get_float32_matmul_precision() != "highest"
