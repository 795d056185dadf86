import os
import subprocess
import sys

import torch

import _accelport_compat


def restrict(gpus):
    os.environ[_accelport_compat.visible_devices_var()] = gpus
    visible = os.environ.get(_accelport_compat.visible_devices_var(), "all")
    if _accelport_compat.visible_devices_var() in os.environ:
        print(f"restricted to {os.environ[_accelport_compat.visible_devices_var()]}")
    env = {**os.environ, _accelport_compat.visible_devices_var(): "0"}
    subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
    os.environ["CUDA_LAUNCH_BLOCKING"] = "1"  # accelport: AP1603: CUDA runtime setting; set the target's equivalent variable
    print("set CUDA_VISIBLE_DEVICES to pick GPUs")
    return visible, torch.version.cuda  # accelport: AP1604: check for the feature you need, not the CUDA version
