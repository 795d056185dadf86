// RMSNorm forward for the TinyLM fused-norm extension (CUDA only).
//
// One block per row; each warp reduces its partial sum of squares with
// __shfl_down_sync, then lane 0 of every warp writes to shared memory.
// Note: the words cudaMalloc and ncclAllReduce in this comment are not calls.

#include <cuda.h>
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <nccl.h>

#include <ATen/cuda/CUDAContext.h>
#include <torch/extension.h>

#define WARP_SIZE 32
#define CUDA_CHECK(expr) TORCH_CHECK((expr) == cudaSuccess, "CUDA call failed: " #expr)

__device__ __forceinline__ float warp_reduce_sum(float value) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    value += __shfl_down_sync(0xffffffff, value, offset);
  }
  return value;
}

template <typename scalar_t>
__global__ void rms_norm_forward_kernel(scalar_t* __restrict__ out,
                                        const scalar_t* __restrict__ in,
                                        const scalar_t* __restrict__ weight,
                                        int hidden, float eps) {
  __shared__ float warp_sums[32];
  const int row = blockIdx.x;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x / WARP_SIZE;
  const scalar_t* x = in + row * hidden;

  float sum = 0.f;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
    float v = static_cast<float>(x[i]);
    sum += v * v;
  }
  sum = warp_reduce_sum(sum);
  if (lane == 0) warp_sums[warp] = sum;
  __syncthreads();
  if (warp == 0) {
    sum = lane < (blockDim.x + 31) / 32 ? warp_sums[lane] : 0.f;
    sum = warp_reduce_sum(sum);
    if (lane == 0) warp_sums[0] = rsqrtf(sum / hidden + eps);
  }
  __syncthreads();
  const float scale = warp_sums[0];
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
    out[row * hidden + i] = static_cast<scalar_t>(static_cast<float>(x[i]) * scale * static_cast<float>(weight[i]));
  }
}

torch::Tensor rms_norm_forward(torch::Tensor input, torch::Tensor weight, double eps) {
  TORCH_CHECK(input.is_cuda(), "input must be a CUDA tensor");
  const at::cuda::OptionalCUDAGuard guard(input.device());
  auto out = torch::empty_like(input);
  const int hidden = input.size(-1);
  const int rows = input.numel() / hidden;
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  rms_norm_forward_kernel<float><<<rows, 256, 0, stream>>>(
      out.data_ptr<float>(), input.data_ptr<float>(), weight.data_ptr<float>(), hidden, static_cast<float>(eps));
  CUDA_CHECK(cudaGetLastError());
  return out;
}

// Rows per launch wave: one block per SM (driver API query).
int sm_count(int device) {
  CUdevice dev;
  int sms = 0;
  cuDeviceGet(&dev, device);
  cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
  return sms;
}

// The output projection runs through cuBLAS: out = x @ w^T.
torch::Tensor project(torch::Tensor x, torch::Tensor w) {
  auto out = torch::empty({x.size(0), w.size(0)}, x.options());
  const float alpha = 1.f, beta = 0.f;
  cublasHandle_t handle = at::cuda::getCurrentCUDABlasHandle();
  cublasSgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, w.size(0), x.size(0), x.size(1), &alpha,
              w.data_ptr<float>(), w.size(1), x.data_ptr<float>(), x.size(1), &beta,
              out.data_ptr<float>(), w.size(0));
  return out;
}

// Gradients of the norm weight are summed across ranks with NCCL directly.
void all_reduce_weight_grad(torch::Tensor grad, ncclComm_t comm) {
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  ncclAllReduce(grad.data_ptr<float>(), grad.data_ptr<float>(), grad.numel(), ncclFloat, ncclSum, comm, stream);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("rms_norm_forward", &rms_norm_forward, "RMSNorm forward (CUDA)");
  m.def("project", &project, "x @ w^T with cuBLAS");
  m.def("sm_count", &sm_count, "number of SMs");
}
