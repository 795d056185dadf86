import torch
import torch.cuda.amp as cuda_amp
from torch.cuda.amp import GradScaler, autocast, custom_fwd


class Scale(torch.autograd.Function):
    @staticmethod
    @custom_fwd(cast_inputs=torch.float32)
    def forward(ctx, x):
        return x * 2

    @staticmethod
    @torch.cuda.amp.custom_bwd
    def backward(ctx, grad):
        return grad * 2


def train(model, x, use_amp):
    scaler = GradScaler(enabled=use_amp)
    other = torch.cuda.amp.GradScaler(init_scale=1024.0)
    plain = torch.amp.GradScaler()
    with autocast(enabled=use_amp):
        loss = model(x).sum()
    with torch.cuda.amp.autocast(True, torch.bfloat16):
        loss = loss + model(x).sum()
    with cuda_amp.autocast():
        loss = loss * 1
    scaler.scale(loss).backward()
    return scaler, other, plain
