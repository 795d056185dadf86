import torch
import torch.amp as cuda_amp
from torch.amp import GradScaler, autocast, custom_fwd

DEVICE = torch.accelerator.current_accelerator() or torch.device("cpu")


class Scale(torch.autograd.Function):
    @staticmethod
    @custom_fwd(cast_inputs=torch.float32, device_type=DEVICE.type)
    def forward(ctx, x):
        return x * 2

    @staticmethod
    @torch.amp.custom_bwd(device_type=DEVICE.type)
    def backward(ctx, grad):
        return grad * 2


def train(model, x, use_amp):
    scaler = GradScaler(DEVICE.type, enabled=use_amp and DEVICE.type != "cpu")
    other = torch.amp.GradScaler(DEVICE.type, init_scale=1024.0, enabled=DEVICE.type != "cpu")
    plain = torch.amp.GradScaler(DEVICE.type, enabled=DEVICE.type != "cpu")
    with autocast(DEVICE.type, enabled=use_amp and DEVICE.type != "cpu"):
        loss = model(x).sum()
    with torch.amp.autocast(DEVICE.type, enabled=DEVICE.type != "cpu", dtype=torch.bfloat16):
        loss = loss + model(x).sum()
    with cuda_amp.autocast(DEVICE.type, enabled=DEVICE.type != "cpu"):
        loss = loss * 1
    scaler.scale(loss).backward()
    return scaler, other, plain
