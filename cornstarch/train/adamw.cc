#include "cornstarch/train/adamw.h"

#include <torch/torch.h>

#include <cmath>

#include "cornstarch/base/check.h"

namespace cornstarch {

torch::Tensor SliceView(const torch::Tensor& param, const ParamSlice& slice) {
  if (slice.begin == 0 && slice.length == param.numel()) return param;
  return param.view({-1}).narrow(0, slice.begin, slice.length);
}

std::vector<ParamSlice> WholeSlices(const std::vector<torch::Tensor>& params) {
  std::vector<ParamSlice> slices;
  for (int i = 0; i < static_cast<int>(params.size()); ++i) slices.push_back({i, 0, params[i].numel(), 0, 0});
  return slices;
}

AdamW::AdamW(std::vector<torch::Tensor> params, std::vector<ParamSlice> slices, const OptimizerConfig& config)
    : params_(std::move(params)), slices_(std::move(slices)), config_(config) {
  for (const ParamSlice& s : slices_) {
    CS_CHECK(s.param >= 0 && s.param < static_cast<int>(params_.size()), "slice of parameter ", s.param);
    const torch::Tensor view = SliceView(params_[s.param], s);
    exp_avg_.push_back(torch::zeros_like(view, torch::MemoryFormat::Contiguous));
    exp_avg_sq_.push_back(torch::zeros_like(view, torch::MemoryFormat::Contiguous));
  }
}

void AdamW::Step(double lr, const std::vector<torch::Tensor>& grads) {
  CS_CHECK(grads.size() == slices_.size(), grads.size(), " gradients for ", slices_.size(), " slices");
  torch::NoGradGuard no_grad;
  ++step_;
  const double bias1 = 1.0 - std::pow(config_.beta1, static_cast<double>(step_));
  const double bias2 = 1.0 - std::pow(config_.beta2, static_cast<double>(step_));
  for (size_t i = 0; i < slices_.size(); ++i) {
    const torch::Tensor& g = grads[i];
    if (!g.defined()) continue;
    const torch::Tensor& whole = params_[slices_[i].param];
    torch::Tensor p = SliceView(whole, slices_[i]);
    if (whole.dim() >= 2 && config_.weight_decay > 0) p.mul_(1.0 - lr * config_.weight_decay);
    exp_avg_[i].mul_(config_.beta1).add_(g, 1.0 - config_.beta1);
    exp_avg_sq_[i].mul_(config_.beta2).addcmul_(g, g, 1.0 - config_.beta2);
    const torch::Tensor denom = (exp_avg_sq_[i].sqrt() / std::sqrt(bias2)).add_(config_.eps);
    p.addcdiv_(exp_avg_[i], denom, -lr / bias1);
  }
}

int64_t AdamW::state_bytes() const {
  int64_t bytes = 0;
  for (const auto* moments : {&exp_avg_, &exp_avg_sq_}) {
    for (const torch::Tensor& m : *moments) bytes += m.numel() * static_cast<int64_t>(m.element_size());
  }
  return bytes;
}

double SquaredGradNorm(const std::vector<torch::Tensor>& grads) {
  torch::Tensor sum;  // accumulated where the gradients live: one host sync, not one per parameter
  for (const torch::Tensor& g : grads) {
    if (!g.defined()) continue;
    const torch::Tensor s = g.to(torch::kDouble).pow(2).sum();
    sum = sum.defined() ? sum + s : s;
  }
  return sum.defined() ? sum.item<double>() : 0.0;
}

void ScaleGrads(const std::vector<torch::Tensor>& grads, double factor) {
  torch::NoGradGuard no_grad;
  for (const torch::Tensor& g : grads) {
    if (g.defined()) g.mul_(factor);
  }
}

double ClipFactor(double global_norm, double max_norm) {
  if (max_norm <= 0) return 1.0;
  const double factor = max_norm / (global_norm + 1e-6);
  return factor < 1.0 ? factor : 1.0;
}

}  // namespace cornstarch
