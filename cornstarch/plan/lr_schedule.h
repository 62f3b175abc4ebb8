// Learning-rate schedule: linear warm-up from 0 to `lr` over warmup_steps, then cosine, linear or constant decay
// reaching `min_lr` at the last step. Pure.
#pragma once

#include <cstdint>

#include "cornstarch/plan/config.h"

namespace cornstarch {

// Learning rate of 0-based `step` out of `total_steps`.
double LearningRate(const OptimizerConfig& opt, int64_t total_steps, int64_t step);

}  // namespace cornstarch
