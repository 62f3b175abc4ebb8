#include "cornstarch/device/cuda_stream.h"

#include "cornstarch/base/check.h"

#ifdef CORNSTARCH_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

namespace cornstarch {

cudaStream_t CurrentCudaStream(const c10::Device& device) {
  CS_CHECK(device.is_cuda(), "CurrentCudaStream: ", device.str(), " is not a CUDA device");
#ifdef CORNSTARCH_TORCH_CUDA
  return c10::cuda::getCurrentCUDAStream(device.index()).stream();
#else
  throw Error("CurrentCudaStream: this build's LibTorch has no CUDA backend; build against a CUDA LibTorch "
              "(CORNSTARCH_LIBTORCH) to train on cuda");
#endif
}

}  // namespace cornstarch
