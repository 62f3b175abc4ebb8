// Process-wide LibTorch settings, and the one place for what differs between LibTorch versions.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <string>

#include "cornstarch/plan/config.h"

namespace cornstarch {

// How the loaded OpenBLAS (LibTorch's BLAS on Debian) runs its threads; kNotOpenBlas for any other BLAS.
enum class BlasThreading { kNotOpenBlas, kSequential, kPthreads, kOpenMp };
BlasThreading LoadedBlasThreading();

// Sets the intra-op thread count (0 = this process's share of the node's cores: cores / ranks_per_node), the BLAS
// threads (below) and works around known defects of the running LibTorch. Returns the thread count in use.
// BLAS threads: OpenBLAS built on OpenMP shares LibTorch's OpenMP pool (a GEMM called inside a parallel region runs
// on its caller's thread), so a large GEMM uses every intra-op thread; OpenBLAS on its own pthreads would spin beside
// that pool (measured: the tiny run 3x slower), so it is pinned to one thread unless OPENBLAS_NUM_THREADS says
// otherwise. glibc's malloc keeps freed activation memory for the next step instead of unmapping it.
int ConfigureTorchRuntime(int64_t num_threads, int ranks_per_node = 1);

// Threads of OpenBLAS's own pool when it is the pthreads build (a no-op otherwise). Benchmarks of plain BLAS-bound
// ops raise it.
void SetBlasThreads(int threads);

// fp32 GEMM rate (FLOP/s) of this process on all its intra-op threads: the MFU peak on CPUs. Large square GEMMs,
// warmed up, the median of several: steady from run to run.
double MeasureGemmFlops();

// The device train.device names for the rank with this local rank: the CPU, or GPU `local_rank`, which it makes
// the process's current CUDA device. Throws Error when 'cuda' cannot be had (a CPU-only LibTorch, no GPU, fewer GPUs than ranks on the node).
c10::Device TrainingDevice(DeviceType device, int local_rank);

// "LibTorch 1.13.0, 2 threads, oneDNN off" — for the start-up log line.
std::string DescribeTorchRuntime();

}  // namespace cornstarch
