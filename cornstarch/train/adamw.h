// AdamW with decoupled weight decay (Loshchilov & Hutter), the same update as torch.optim.AdamW. State exists
// only for the parameters handed in, so frozen parameters never get optimizer state. Weight decay applies to
// matrices (dim >= 2), not to norm gains or biases.
#pragma once

#include <torch/types.h>

#include <vector>

#include "cornstarch/plan/config.h"

namespace cornstarch {

class AdamW {
 public:
  AdamW(std::vector<torch::Tensor> params, const OptimizerConfig& config);

  // One update at learning rate `lr` from the parameters' current .grad(); a parameter without a gradient is
  // skipped.
  void Step(double lr);
  void ZeroGrad();

  int64_t step_count() const { return step_; }
  // Where bias correction continues after the moments were restored from a checkpoint.
  void set_step_count(int64_t step) { step_ = step; }
  const std::vector<torch::Tensor>& params() const { return params_; }
  const std::vector<torch::Tensor>& exp_avg() const { return exp_avg_; }
  const std::vector<torch::Tensor>& exp_avg_sq() const { return exp_avg_sq_; }

 private:
  std::vector<torch::Tensor> params_, exp_avg_, exp_avg_sq_;
  OptimizerConfig config_;
  int64_t step_ = 0;
};

// Sum of squared gradient entries over `params` (in fp64), the building block of the global norm: stages and
// replicas add their sums before taking the square root.
double SquaredGradNorm(const std::vector<torch::Tensor>& params);

// Multiplies every gradient by `factor`.
void ScaleGrads(const std::vector<torch::Tensor>& params, double factor);

// torch.nn.utils.clip_grad_norm_'s rule: the factor that brings a global norm down to max_norm (1 if below or if
// clipping is disabled with max_norm = 0).
double ClipFactor(double global_norm, double max_norm);

}  // namespace cornstarch
