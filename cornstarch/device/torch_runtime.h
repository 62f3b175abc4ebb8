// Process-wide LibTorch settings, and the one place for what differs between LibTorch versions.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <string>

#include "cornstarch/plan/config.h"

namespace cornstarch {

// Sets the intra-op thread count (0 = this process's share of the node's cores: cores / ranks_per_node) and
// works around known defects of the running LibTorch. Returns the thread count in use.
int ConfigureTorchRuntime(int64_t num_threads, int ranks_per_node = 1);

// Threads of OpenBLAS's own pool (when libblas.so.3 is OpenBLAS; a no-op otherwise). ConfigureTorchRuntime sets
// 1, because intra-op parallelism comes from LibTorch's pool; benchmarks of plain BLAS-bound ops raise it.
void SetBlasThreads(int threads);

// fp32 GEMM rate (FLOP/s) of this process with its current threads: the MFU peak on CPUs.
double MeasureGemmFlops();

// The device train.device names for the rank with this local rank: the CPU, or GPU `local_rank`. Throws Error
// when 'cuda' cannot be had (a CPU-only LibTorch, no GPU, fewer GPUs than ranks on the node).
c10::Device TrainingDevice(DeviceType device, int local_rank);

// "LibTorch 1.13.0, 2 threads, oneDNN off" — for the start-up log line.
std::string DescribeTorchRuntime();

}  // namespace cornstarch
