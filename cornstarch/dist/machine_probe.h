// This machine described as the cluster: section describes one, for CPU runs (the layout search's defaults are
// GPUs'): measured with every rank running, since training ranks share the node's cores and memory bandwidth too.
// The GEMM rate is the slowest rank's fp32 rate on its intra-op threads; the bandwidth a collective gets comes from
// a 16 MiB all-reduce over the world, less a one-float one's time, which is the latency. The share of the GEMM rate
// that layers reach and the fixed cost per layer stay as given: those need training runs (bench/layout_bench fits
// them).
#pragma once

#include "cornstarch/dist/communicator.h"
#include "cornstarch/plan/config.h"

namespace cornstarch {

// `given` with tflops, intra_node_gbps and inter_node_gbps (both the world's all-reduce: one measurement cannot tell
// them apart), latency_us, gpus_per_node (`local_ranks`, the fullest node's) and cores_per_node (the smallest node's
// cores, where fewer than its ranks; else 0) measured here, the same on every rank. Collective over `world`; call it
// after the torch runtime is configured as training configures it, so the GEMMs run on the threads training gets.
ClusterConfig MeasureCpuCluster(Communicator& world, int local_ranks, ClusterConfig given);

// The largest of every rank's `value`: the slowest rank's time. Collective over `world`.
double MaxOverRanks(Communicator& world, double value);

}  // namespace cornstarch
