// Forward time of every layer on this process's device, for the configured shapes: what the frozen-aware cost
// model wants where FLOPs mispredict (small GEMMs, convolutions, attention kernels and memory-bound layers run
// at very different rates). Each layer is built alone from its seed, as training builds it, and timed on the
// real activations of a synthetic microbatch, chain after chain, so profiling never holds more than one layer.
#pragma once

#include <vector>

#include "cornstarch/plan/config.h"

namespace cornstarch {

// Seconds of one microbatch's forward per layer of BuildModelSpec(config.model) on train.device (GPU 0 on cuda) in
// train.precision: the fastest of `repeats` timed runs after one warm-up run.
std::vector<double> ProfileForwardSeconds(const Config& config, int repeats = 3);

}  // namespace cornstarch
