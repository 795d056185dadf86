import torch
import torch.nn as nn
from flash_attn import flash_attn_func  # accelport: AP8001: CUDA-only package; `accelport inventory` lists the per-vendor alternatives
from torch.utils.cpp_extension import load

kernels = load("fused", sources=["fused.cpp", "fused_kernel.cu"])  # accelport: AP6001: CUDA extension: port the kernels (route B) or use the vendor's extension type
BACKENDS = {"cuda": "nccl", "cpu": "gloo"}  # accelport: AP1007: check whether this names a device; if so use the selected device's type  # accelport: AP9001: NCCL is NVIDIA's; test for the capability needed, or name the target's collective library


def build(model):
    if torch.cuda.get_device_capability() >= (8, 0):  # accelport: AP1109: replace the compute-capability check with a check for the feature it stands for
        model = model.half()
    graph = torch.cuda.CUDAGraph()  # accelport: AP1110: CUDA graph capture: port to torch.accelerator.Graph and check the target's capture limits
    buffer = torch.cuda.FloatTensor(8, 16)  # accelport: AP1112: construct with dtype= and device= instead of a legacy CUDA tensor type
    props = torch.cuda.get_device_properties(0)  # accelport: AP1108: use torch.get_device_module(device) where the target has this; decide what to do where it does not
    model = nn.DataParallel(model)  # accelport: AP1303: move to DistributedDataParallel launched with torchrun
    torch.cuda.set_per_process_memory_fraction(0.9)  # accelport: AP1111: allocator control: use torch.get_device_module(device) where the target supports it, or drop it
    return model, graph, buffer, props.total_memory, flash_attn_func, kernels
