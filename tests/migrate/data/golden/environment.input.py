import os
import subprocess
import sys

import torch


def restrict(gpus):
    os.environ["CUDA_VISIBLE_DEVICES"] = gpus
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "all")
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        print(f"restricted to {os.environ['CUDA_VISIBLE_DEVICES']}")
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "0"}
    subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
    os.environ["CUDA_LAUNCH_BLOCKING"] = "1"
    print("set CUDA_VISIBLE_DEVICES to pick GPUs")
    return visible, torch.version.cuda
