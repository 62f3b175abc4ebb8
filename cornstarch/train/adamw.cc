#include "cornstarch/train/adamw.h"

#include <torch/torch.h>

#include <cmath>

namespace cornstarch {

AdamW::AdamW(std::vector<torch::Tensor> params, const OptimizerConfig& config)
    : params_(std::move(params)), config_(config) {
  for (const torch::Tensor& p : params_) {
    exp_avg_.push_back(torch::zeros_like(p, torch::MemoryFormat::Contiguous));
    exp_avg_sq_.push_back(torch::zeros_like(p, torch::MemoryFormat::Contiguous));
  }
}

void AdamW::Step(double lr) {
  torch::NoGradGuard no_grad;
  ++step_;
  const double bias1 = 1.0 - std::pow(config_.beta1, static_cast<double>(step_));
  const double bias2 = 1.0 - std::pow(config_.beta2, static_cast<double>(step_));
  for (size_t i = 0; i < params_.size(); ++i) {
    torch::Tensor& p = params_[i];
    const torch::Tensor& g = p.grad();
    if (!g.defined()) continue;
    if (p.dim() >= 2 && config_.weight_decay > 0) p.mul_(1.0 - lr * config_.weight_decay);
    exp_avg_[i].mul_(config_.beta1).add_(g, 1.0 - config_.beta1);
    exp_avg_sq_[i].mul_(config_.beta2).addcmul_(g, g, 1.0 - config_.beta2);
    const torch::Tensor denom = (exp_avg_sq_[i].sqrt() / std::sqrt(bias2)).add_(config_.eps);
    p.addcdiv_(exp_avg_[i], denom, -lr / bias1);
  }
}

void AdamW::ZeroGrad() {
  for (torch::Tensor& p : params_) {
    if (p.grad().defined()) p.mutable_grad().zero_();
  }
}

double SquaredGradNorm(const std::vector<torch::Tensor>& params) {
  torch::Tensor sum;  // accumulated where the gradients live: one host sync, not one per parameter
  for (const torch::Tensor& p : params) {
    if (!p.grad().defined()) continue;
    const torch::Tensor s = p.grad().to(torch::kDouble).pow(2).sum();
    sum = sum.defined() ? sum + s : s;
  }
  return sum.defined() ? sum.item<double>() : 0.0;
}

void ScaleGrads(const std::vector<torch::Tensor>& params, double factor) {
  torch::NoGradGuard no_grad;
  for (const torch::Tensor& p : params) {
    if (p.grad().defined()) p.grad().mul_(factor);
  }
}

double ClipFactor(double global_norm, double max_norm) {
  if (max_norm <= 0) return 1.0;
  const double factor = max_norm / (global_norm + 1e-6);
  return factor < 1.0 ? factor : 1.0;
}

}  // namespace cornstarch
