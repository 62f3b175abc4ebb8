#include "cornstarch/plan/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace cornstarch {

double LearningRate(const OptimizerConfig& opt, int64_t total_steps, int64_t step) {
  if (step < opt.warmup_steps) return opt.lr * static_cast<double>(step + 1) / static_cast<double>(opt.warmup_steps);
  if (opt.decay == LrDecay::kConstant) return opt.lr;
  const int64_t decay_steps = std::max<int64_t>(1, total_steps - 1 - opt.warmup_steps);
  const double progress = std::min(1.0, static_cast<double>(step - opt.warmup_steps) / decay_steps);
  const double shape = opt.decay == LrDecay::kCosine ? 0.5 * (1.0 + std::cos(M_PI * progress)) : 1.0 - progress;
  return opt.min_lr + (opt.lr - opt.min_lr) * shape;
}

}  // namespace cornstarch
