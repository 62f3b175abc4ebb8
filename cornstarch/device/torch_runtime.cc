#include "cornstarch/device/torch_runtime.h"

#include <torch/cuda.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <dlfcn.h>
#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <limits>
#include <thread>
#include <vector>

#include "cornstarch/base/check.h"
#include "cornstarch/device/cuda_device.h"

namespace cornstarch {

namespace {

// LibTorch's CPU allocator is plain malloc. glibc serves blocks above its mmap threshold (adaptive, from 128 KiB)
// with fresh mappings and gives freed heap tops back, so every step faults the same activation pages in again
// (W1: a third of the process's time in the kernel). Keeping blocks up to glibc's largest threshold on the heap
// and never trimming it makes later steps reuse the memory (W1 10.4 -> 8.2 s/step; the peak is unchanged). Set
// when the library loads, before the first large block; GLIBC_TUNABLES, when it sets malloc tunables, is the user's.
const bool malloc_tuned = [] {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables != nullptr && std::string(tunables).find("glibc.malloc.") != std::string::npos) return false;
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
  return true;
}();

template <typename F>
F OpenBlasSymbol(const char* name) {
  // OpenBLAS's symbols exist only when libblas.so.3 resolves to it.
  return reinterpret_cast<F>(dlsym(RTLD_DEFAULT, name));
}

int BlasThreads() {
  const auto get = OpenBlasSymbol<int (*)()>("openblas_get_num_threads");
  return get != nullptr ? get() : 1;
}

}  // namespace

BlasThreading LoadedBlasThreading() {
  const auto parallel = OpenBlasSymbol<int (*)()>("openblas_get_parallel");
  if (parallel == nullptr) return BlasThreading::kNotOpenBlas;
  switch (parallel()) {
    case 0: return BlasThreading::kSequential;
    case 1: return BlasThreading::kPthreads;
    default: return BlasThreading::kOpenMp;
  }
}

int ConfigureTorchRuntime(int64_t num_threads, int ranks_per_node) {
  const int64_t share = std::thread::hardware_concurrency() / std::max(1, ranks_per_node);
  const int threads = static_cast<int>(num_threads > 0 ? num_threads : std::max<int64_t>(1, share));
  at::set_num_threads(threads);  // OpenBLAS on OpenMP follows this count (omp_get_max_threads)
  if (std::getenv("OPENBLAS_NUM_THREADS") == nullptr) SetBlasThreads(1);
#if TORCH_VERSION_MAJOR < 2
  // Debian's LibTorch 1.13 returns garbage weight gradients (around 1e30) from oneDNN's Conv1d backward on
  // the audio stem; the native kernels are correct. Found by comparing against mkldnn disabled.
  at::globalContext().setUserEnabledMkldnn(false);
#endif
  return threads;
}

void SetBlasThreads(int threads) {
  // Only the pthreads build has a pool of its own; the OpenMP build's setter would change LibTorch's count too.
  if (LoadedBlasThreading() != BlasThreading::kPthreads) return;
  OpenBlasSymbol<void (*)(int)>("openblas_set_num_threads")(threads);
}

double MeasureGemmFlops() {
  torch::NoGradGuard no_grad;
  // 1024^3 is large enough for every thread to run full-size blocks (512^3 read 84-243 GFLOP/s from run to run on 2
  // cores) and short enough (~10 ms) to repeat at start-up.
  constexpr int64_t kN = 1024;
  constexpr int kRounds = 7;
  const int blas_threads = BlasThreads();
  SetBlasThreads(at::get_num_threads());
  const torch::Tensor a = torch::randn({kN, kN}), b = torch::randn({kN, kN});
  torch::Tensor c = torch::mm(a, b);  // warm-up: pages, the pool's threads
  torch::mm_out(c, a, b);
  std::vector<double> seconds;
  for (int i = 0; i < kRounds; ++i) {
    const auto start = std::chrono::steady_clock::now();
    torch::mm_out(c, a, b);
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  SetBlasThreads(blas_threads);
  std::nth_element(seconds.begin(), seconds.begin() + kRounds / 2, seconds.end());
  return 2.0 * kN * kN * kN / seconds[kRounds / 2];
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
  SelectCudaDevice(local_rank);  // before any CUDA work of this rank: our kernels launch on the current device
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(local_rank));
}

std::string DescribeTorchRuntime() {
  std::string blas;
  switch (LoadedBlasThreading()) {
    case BlasThreading::kNotOpenBlas: blas = "BLAS not OpenBLAS"; break;
    case BlasThreading::kSequential: blas = "OpenBLAS sequential"; break;
    case BlasThreading::kPthreads:
      blas = "OpenBLAS on pthreads (GEMMs on 1 thread: install libopenblas0-openmp)";
      break;
    case BlasThreading::kOpenMp: blas = "OpenBLAS on OpenMP"; break;
  }
  if (LoadedBlasThreading() == BlasThreading::kPthreads) blas += ", " + std::to_string(BlasThreads()) + " BLAS threads";
  return std::string("LibTorch ") + TORCH_VERSION + ", " + std::to_string(at::get_num_threads()) +
         " intra-op threads, " + blas + ", oneDNN " + (at::globalContext().userEnabledMkldnn() ? "on" : "off");
}

}  // namespace cornstarch
