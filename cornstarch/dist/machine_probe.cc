#include "cornstarch/dist/machine_probe.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "cornstarch/device/torch_runtime.h"

namespace cornstarch {

namespace {

// Median seconds of `reps` all-reduces of `floats` floats over the world, each the slowest rank's.
double AllReduceSeconds(Communicator& world, int64_t floats, int reps) {
  at::Tensor t = at::ones({floats});
  std::vector<double> seconds;
  for (int i = 0; i < reps; ++i) {
    world.Barrier();
    const auto start = std::chrono::steady_clock::now();
    world.AllReduce(t, ReduceOp::kSum);
    seconds.push_back(
        MaxOverRanks(world, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()));
  }
  std::nth_element(seconds.begin(), seconds.begin() + reps / 2, seconds.end());
  return seconds[reps / 2];
}

}  // namespace

double MaxOverRanks(Communicator& world, double value) {
  at::Tensor t = at::full({1}, value, at::kDouble);
  world.AllReduce(t, ReduceOp::kMax);
  return t.item<double>();
}

ClusterConfig MeasureCpuCluster(Communicator& world, int local_ranks, ClusterConfig given) {
  given.tflops = -MaxOverRanks(world, -MeasureGemmFlops()) / 1e12;
  const int64_t floats = 4 << 20;
  const double big = AllReduceSeconds(world, floats, 5), small = AllReduceSeconds(world, 1, 20);
  const double n = world.size();
  given.latency_us = small * 1e6;
  if (world.size() > 1) {
    // A ring all-reduce moves 2 (n - 1) / n of the buffer through each rank. (Noise cannot make the link free.)
    const double gbps = 2 * (n - 1) / n * 4.0 * static_cast<double>(floats) / std::max(big - small, 0.1 * big) / 1e9;
    given.intra_node_gbps = given.inter_node_gbps = gbps;
  }
  // The fullest node's ranks and the smallest node's cores: every rank must derive the same numbers.
  const auto ranks = static_cast<int64_t>(MaxOverRanks(world, local_ranks));
  const double here = std::thread::hardware_concurrency();
  const auto cores = static_cast<int64_t>(-MaxOverRanks(world, -here));
  given.gpus_per_node = ranks;
  given.cores_per_node = ranks > cores ? cores : 0;
  return given;
}

}  // namespace cornstarch
