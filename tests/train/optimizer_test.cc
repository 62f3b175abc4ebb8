// AdamW, clipping and the LR schedule against LibTorch's own implementations and closed forms.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <cmath>

#include "cornstarch/plan/config.h"
#include "cornstarch/train/adamw.h"
#include "cornstarch/plan/lr_schedule.h"

using namespace cornstarch;

TEST_CASE("AdamW matches torch::optim::AdamW, decaying matrices only", "[optim]") {
  torch::manual_seed(0);
  OptimizerConfig cfg;
  cfg.beta1 = 0.8;
  cfg.beta2 = 0.9;
  cfg.eps = 1e-6;
  cfg.weight_decay = 0.1;
  const torch::Tensor w0 = torch::randn({5, 3}), b0 = torch::randn({3});
  torch::Tensor w = w0.clone().requires_grad_(true), b = b0.clone().requires_grad_(true);
  torch::Tensor rw = w0.clone().requires_grad_(true), rb = b0.clone().requires_grad_(true);
  AdamW ours({w, b}, cfg);
  auto options = [&](double wd) {
    return torch::optim::AdamWOptions(1.0).betas({cfg.beta1, cfg.beta2}).eps(cfg.eps).weight_decay(wd);
  };
  torch::optim::AdamW ref_w({rw}, options(cfg.weight_decay));
  torch::optim::AdamW ref_b({rb}, options(0.0));
  for (int step = 0; step < 10; ++step) {
    const double lr = 0.01 * (step + 1);
    for (auto* group : {&ref_w.param_groups()[0], &ref_b.param_groups()[0]}) {
      static_cast<torch::optim::AdamWOptions&>(group->options()).lr(lr);
    }
    const torch::Tensor gw = torch::randn({5, 3}), gb = torch::randn({3});
    w.mutable_grad() = gw.clone();
    b.mutable_grad() = gb.clone();
    rw.mutable_grad() = gw.clone();
    rb.mutable_grad() = gb.clone();
    ours.Step(lr);
    ref_w.step();
    ref_b.step();
  }
  // Same formula, float32 both sides: agreement to rounding.
  CHECK(torch::allclose(w, rw, /*rtol=*/1e-5, /*atol=*/1e-6));
  CHECK(torch::allclose(b, rb, 1e-5, 1e-6));
  CHECK(ours.step_count() == 10);
}

TEST_CASE("global-norm clipping matches torch::nn::utils::clip_grad_norm_", "[optim]") {
  torch::manual_seed(1);
  std::vector<torch::Tensor> ours, ref;
  for (int i = 0; i < 3; ++i) {
    const torch::Tensor g = torch::randn({4, i + 1}) * 3;
    ours.push_back(torch::zeros({4, i + 1}, torch::requires_grad()));
    ref.push_back(torch::zeros({4, i + 1}, torch::requires_grad()));
    ours.back().mutable_grad() = g.clone();
    ref.back().mutable_grad() = g.clone();
  }
  const double norm = std::sqrt(SquaredGradNorm(ours));
  const double ref_norm = torch::nn::utils::clip_grad_norm_(ref, 1.5);
  CHECK(norm == Approx(ref_norm).epsilon(1e-6));
  ScaleGrads(ours, ClipFactor(norm, 1.5));
  for (int i = 0; i < 3; ++i) CHECK(torch::allclose(ours[i].grad(), ref[i].grad(), 1e-5, 1e-7));
  CHECK(ClipFactor(0.5, 1.5) == 1.0);
  CHECK(ClipFactor(100.0, 0.0) == 1.0);
}

TEST_CASE("LR schedule: linear warm-up, then decay to min_lr at the last step", "[optim]") {
  OptimizerConfig o;
  o.lr = 1.0;
  o.min_lr = 0.1;
  o.warmup_steps = 4;
  const int64_t steps = 14;
  CHECK(LearningRate(o, steps, 0) == Approx(0.25));
  CHECK(LearningRate(o, steps, 3) == Approx(1.0));
  for (const LrDecay decay : {LrDecay::kCosine, LrDecay::kLinear}) {
    o.decay = decay;
    INFO(NameOf(decay));
    CHECK(LearningRate(o, steps, 4) == Approx(1.0));
    CHECK(LearningRate(o, steps, 13) == Approx(0.1));
    for (int64_t s = 4; s < 13; ++s) CHECK(LearningRate(o, steps, s + 1) < LearningRate(o, steps, s));
  }
  o.decay = LrDecay::kLinear;
  CHECK(LearningRate(o, steps, 7) == Approx(1.0 - 0.9 * 3.0 / 9.0));
  o.decay = LrDecay::kCosine;
  CHECK(LearningRate(o, 10, 6) == Approx(0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 2.0 / 5.0))));
  o.decay = LrDecay::kConstant;
  CHECK(LearningRate(o, steps, 12) == 1.0);
}
