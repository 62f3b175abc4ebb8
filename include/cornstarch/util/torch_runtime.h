// Process-wide LibTorch settings, and the one place for what differs between LibTorch versions.
#pragma once

#include <cstdint>
#include <string>

namespace cornstarch {

// Sets the intra-op thread count (0 = this process's share of the node's cores: cores / ranks_per_node) and
// works around known defects of the running LibTorch. Returns the thread count in use.
int ConfigureTorchRuntime(int64_t num_threads, int ranks_per_node = 1);

// "LibTorch 1.13.0, 2 threads, oneDNN off" — for the start-up log line.
std::string DescribeTorchRuntime();

}  // namespace cornstarch
