"""Build the fused RMSNorm extension: `pip install -e .` on a CUDA machine."""

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

setup(
    name="tinylm-fused",
    ext_modules=[
        CUDAExtension(
            name="tinylm_fused",
            sources=["csrc/rms_norm_kernel.cu"],
            extra_compile_args={"cxx": ["-O3"], "nvcc": ["-O3", "--use_fast_math", "-gencode=arch=compute_80,code=sm_80"]},
            libraries=["cublas", "nccl"],
        )
    ],
    cmdclass={"build_ext": BuildExtension},
)
