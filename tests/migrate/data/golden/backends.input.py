import torch


def configure(deterministic, tf32):
    torch.backends.cudnn.benchmark = not deterministic
    torch.backends.cudnn.deterministic = deterministic
    torch.backends.cudnn.deterministic = True
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = False
    if torch.backends.cudnn.deterministic:
        print("deterministic")
    return torch.backends.cuda.matmul.allow_tf32
