// Where our own CUDA kernels queue their work: on LibTorch's current stream of the tensors' device, so they are
// ordered with LibTorch's own kernels whatever stream a caller (or a later overlap scheme) makes current.
#pragma once

#include <c10/core/Device.h>
#include <cuda_runtime_api.h>

namespace cornstarch {

// LibTorch's current CUDA stream on `device`. Needs a LibTorch built with CUDA (CORNSTARCH_TORCH_CUDA, which both
// builds define when libtorch_cuda is present); with a CPU LibTorch no CUDA tensor exists, and this throws Error.
cudaStream_t CurrentCudaStream(const c10::Device& device);

}  // namespace cornstarch
