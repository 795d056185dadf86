"""accelport: move CUDA-bound PyTorch code to any accelerator PyTorch can drive, and prove the move."""

__version__ = "0.1.0"
