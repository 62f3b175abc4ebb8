// AdamW with decoupled weight decay (Loshchilov & Hutter), the same update as torch.optim.AdamW. State exists
// only for the slices of parameters handed in: whole trainable parameters, or with a sharded optimizer this
// rank's slices of them (plan/grad_buckets.h), so frozen parameters never get optimizer state and a sharded run
// keeps ~1/dp of it. The update is element-wise, so a slice gets exactly the arithmetic its elements get in the
// whole parameter. Weight decay applies to matrices (dim >= 2), not to norm gains or biases.
#pragma once

#include <torch/types.h>

#include <vector>

#include "cornstarch/plan/config.h"
#include "cornstarch/plan/grad_buckets.h"

namespace cornstarch {

// The part of `param` that `slice` covers: the parameter itself when the slice is all of it, else a flat view.
torch::Tensor SliceView(const torch::Tensor& param, const ParamSlice& slice);
// Every parameter as one slice.
std::vector<ParamSlice> WholeSlices(const std::vector<torch::Tensor>& params);

class AdamW {
 public:
  AdamW(std::vector<torch::Tensor> params, std::vector<ParamSlice> slices, const OptimizerConfig& config);

  // One update at learning rate `lr`; `grads[i]` is the gradient of slice i, shaped like its view (undefined:
  // the slice is skipped).
  void Step(double lr, const std::vector<torch::Tensor>& grads);

  int64_t step_count() const { return step_; }
  // Where bias correction continues after the moments were restored from a checkpoint.
  void set_step_count(int64_t step) { step_ = step; }
  const std::vector<torch::Tensor>& params() const { return params_; }
  const std::vector<ParamSlice>& slices() const { return slices_; }
  const std::vector<torch::Tensor>& exp_avg() const { return exp_avg_; }
  const std::vector<torch::Tensor>& exp_avg_sq() const { return exp_avg_sq_; }
  // Bytes of optimizer state held here (both moments).
  int64_t state_bytes() const;

 private:
  std::vector<torch::Tensor> params_;
  std::vector<ParamSlice> slices_;
  std::vector<torch::Tensor> exp_avg_, exp_avg_sq_;
  OptimizerConfig config_;
  int64_t step_ = 0;
};

// Sum of squared entries over `grads` (in fp64; undefined ones skipped), the building block of the global norm:
// stages and shards add their sums before taking the square root.
double SquaredGradNorm(const std::vector<torch::Tensor>& grads);

// Multiplies every gradient by `factor`.
void ScaleGrads(const std::vector<torch::Tensor>& grads, double factor);

// torch.nn.utils.clip_grad_norm_'s rule: the factor that brings a global norm down to max_norm (1 if below or if
// clipping is disabled with max_norm = 0).
double ClipFactor(double global_norm, double max_norm);

}  // namespace cornstarch
