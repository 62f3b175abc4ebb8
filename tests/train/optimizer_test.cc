// AdamW, clipping and the LR schedule against LibTorch's own implementations and closed forms.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <algorithm>
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
  AdamW ours({w, b}, WholeSlices({w, b}), cfg);
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
    ours.Step(lr, {w.grad(), b.grad()});
    ref_w.step();
    ref_b.step();
  }
  // Same formula, float32 both sides: agreement to rounding.
  CHECK(torch::allclose(w, rw, /*rtol=*/1e-5, /*atol=*/1e-6));
  CHECK(torch::allclose(b, rb, 1e-5, 1e-6));
  CHECK(ours.step_count() == 10);
}

TEST_CASE("gradient buckets: reverse order, bounded size, and shards that tile every parameter once", "[optim]") {
  const std::vector<int64_t> numels = {10, 3, 40, 7, 1, 25, 8};
  for (int shards : {1, 2, 3, 4, 7}) {
    for (int64_t bucket_elements : {1, 8, 16, 50, 1000}) {
      INFO(shards << " shards, buckets of " << bucket_elements << " elements");
      const std::vector<GradBucket> buckets = PlanGradBuckets(numels, 4, bucket_elements * 4, shards);
      int expected_param = static_cast<int>(numels.size()) - 1;
      for (const GradBucket& b : buckets) {
        REQUIRE(!b.entries.empty());
        CHECK((b.numel <= bucket_elements || b.entries.size() == 1));  // only a large parameter overflows
        CHECK(b.padded % shards == 0);
        CHECK(b.padded - b.numel < shards);
        int64_t offset = 0;
        for (const GradBucket::Entry& e : b.entries) {
          CHECK(e.param == expected_param--);  // the last parameter first
          CHECK(e.offset == offset);
          CHECK(e.numel == numels[e.param]);
          offset += e.numel;
        }
        CHECK(offset == b.numel);
      }
      CHECK(expected_param == -1);
      // Every element of every parameter is owned by exactly one shard, at a place inside that shard.
      std::vector<std::vector<int>> owners(numels.size());
      for (size_t p = 0; p < numels.size(); ++p) owners[p].assign(numels[p], 0);
      for (int s = 0; s < shards; ++s) {
        for (const ParamSlice& sl : ShardSlices(buckets, s, shards)) {
          const GradBucket& b = buckets[sl.bucket];
          CHECK(sl.shard_offset >= 0);
          CHECK(sl.shard_offset + sl.length <= b.padded / shards);
          for (int64_t i = 0; i < sl.length; ++i) ++owners[sl.param][sl.begin + i];
        }
      }
      for (size_t p = 0; p < numels.size(); ++p) {
        CHECK(std::count(owners[p].begin(), owners[p].end(), 1) == numels[p]);
      }
    }
  }
}

TEST_CASE("AdamW over slices (a sharded optimizer's) updates every element as over whole parameters", "[optim]") {
  torch::manual_seed(2);
  OptimizerConfig cfg;
  cfg.weight_decay = 0.1;
  const std::vector<torch::Tensor> init = {torch::randn({7, 5}), torch::randn({5}), torch::randn({3, 4})};
  auto copies = [&] {
    std::vector<torch::Tensor> ps;
    for (const torch::Tensor& t : init) ps.push_back(t.clone().requires_grad_(true));
    return ps;
  };
  std::vector<torch::Tensor> whole = copies();
  AdamW reference(whole, WholeSlices(whole), cfg);
  // Three shards of 20-element buckets: slices start and end inside parameters, and the bias is one whole slice.
  const std::vector<GradBucket> buckets = PlanGradBuckets({35, 5, 12}, 4, 80, 3);
  std::vector<std::vector<torch::Tensor>> sharded;
  std::vector<std::unique_ptr<AdamW>> shards;
  for (int s = 0; s < 3; ++s) {
    sharded.push_back(copies());
    shards.push_back(std::make_unique<AdamW>(sharded.back(), ShardSlices(buckets, s, 3), cfg));
  }
  int64_t state = 0;
  for (int step = 0; step < 5; ++step) {
    std::vector<torch::Tensor> grads;
    for (const torch::Tensor& t : init) grads.push_back(torch::randn(t.sizes()));
    reference.Step(0.01, grads);
    for (int s = 0; s < 3; ++s) {
      std::vector<torch::Tensor> slice_grads;
      for (const ParamSlice& sl : shards[s]->slices()) {
        slice_grads.push_back(SliceView(grads[sl.param], sl).clone());
      }
      shards[s]->Step(0.01, slice_grads);
    }
  }
  // Each element belongs to one shard; that shard's copy of it must equal the reference bitwise (element-wise
  // arithmetic, the same operations in the same order).
  for (int s = 0; s < 3; ++s) {
    state += shards[s]->state_bytes();
    for (const ParamSlice& sl : shards[s]->slices()) {
      INFO("shard " << s << " param " << sl.param << " [" << sl.begin << ", " << sl.begin + sl.length << ")");
      CHECK(torch::equal(SliceView(sharded[s][sl.param], sl), SliceView(whole[sl.param], sl)));
    }
  }
  CHECK(state == reference.state_bytes());  // the shards' states add up to the whole, nothing twice
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
  std::vector<torch::Tensor> grads;
  for (const torch::Tensor& p : ours) grads.push_back(p.grad());
  const double norm = std::sqrt(SquaredGradNorm(grads));
  const double ref_norm = torch::nn::utils::clip_grad_norm_(ref, 1.5);
  CHECK(norm == Approx(ref_norm).epsilon(1e-6));
  ScaleGrads(grads, ClipFactor(norm, 1.5));
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
