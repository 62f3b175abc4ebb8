#include "cornstarch/device/torch_runtime.h"

#include <torch/cuda.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "cornstarch/base/check.h"

namespace cornstarch {

int ConfigureTorchRuntime(int64_t num_threads, int ranks_per_node) {
  const int64_t share = std::thread::hardware_concurrency() / std::max(1, ranks_per_node);
  const int threads = static_cast<int>(num_threads > 0 ? num_threads : std::max<int64_t>(1, share));
  at::set_num_threads(threads);
  // Intra-op parallelism comes from LibTorch's OpenMP pool; OpenBLAS's own pthreads on top of it oversubscribe the
  // cores (measured: the tiny run is 3x slower).
  SetBlasThreads(1);
#if TORCH_VERSION_MAJOR < 2
  // Debian's LibTorch 1.13 returns garbage weight gradients (around 1e30) from oneDNN's Conv1d backward on
  // the audio stem; the native kernels are correct. Found by comparing against mkldnn disabled.
  at::globalContext().setUserEnabledMkldnn(false);
#endif
  return threads;
}

void SetBlasThreads(int threads) {
  using SetThreads = void (*)(int);
  // The symbol exists only when libblas.so.3 resolves to OpenBLAS.
  if (auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) set(threads);
}

double MeasureGemmFlops() {
  torch::NoGradGuard no_grad;
  // One GEMM with all of this process's threads: the rate its cores can reach.
  SetBlasThreads(at::get_num_threads());
  const torch::Tensor a = torch::randn({512, 512}), b = torch::randn({512, 512});
  torch::mm(a, b);  // warm-up
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    const auto start = std::chrono::steady_clock::now();
    torch::mm(a, b);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  SetBlasThreads(1);
  return 2.0 * 512 * 512 * 512 / best;
}

c10::Device TrainingDevice(DeviceType device, int local_rank) {
  if (device == DeviceType::kCpu) return c10::Device(c10::kCPU);
  if (!torch::cuda::is_available()) {
    throw Error("train.device: 'cuda' needs a CUDA build of LibTorch and a visible GPU; this process runs LibTorch " +
                std::string(TORCH_VERSION) + " and sees no CUDA device");
  }
  const int64_t count = static_cast<int64_t>(torch::cuda::device_count());
  if (local_rank >= count) {
    throw Error("train.device: local rank " + std::to_string(local_rank) + " has no GPU of its own (" +
                std::to_string(count) + " visible on this node); start at most one rank per GPU");
  }
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(local_rank));
}

std::string DescribeTorchRuntime() {
  return std::string("LibTorch ") + TORCH_VERSION + ", " + std::to_string(at::get_num_threads()) +
         " intra-op threads, oneDNN " + (at::globalContext().userEnabledMkldnn() ? "on" : "off");
}

}  // namespace cornstarch
