#include <catch2/catch.hpp>
#include <functional>
#include <random>

#include "cornstarch/plan/config.h"
#include "cornstarch/plan/model_spec.h"
#include "cornstarch/plan/cost_model.h"
#include "cornstarch/plan/partitioner.h"

using namespace cornstarch;

namespace {

// Every way to cut n layers into k non-empty contiguous stages, in lexicographic order of the boundaries.
void ForEachPartition(int n, int k, const std::function<void(const std::vector<int>&)>& visit) {
  std::vector<int> b = {0};
  std::function<void(int)> rec = [&](int start) {
    if (static_cast<int>(b.size()) == k) {
      b.push_back(n);
      visit(b);
      b.pop_back();
      return;
    }
    for (int cut = start + 1; cut <= n - (k - static_cast<int>(b.size())); ++cut) {
      b.push_back(cut);
      rec(cut);
      b.pop_back();
    }
  };
  rec(0);
}

double BruteForce(const std::vector<double>& costs, int k) {
  double best = 1e300;
  ForEachPartition(static_cast<int>(costs.size()), k,
                   [&](const std::vector<int>& b) { best = std::min(best, Bottleneck(costs, b)); });
  return best;
}

Config TwoEncoders(const std::vector<std::string>& overrides) {
  std::vector<std::string> all = {"model.encoders.vision.type=vision", "model.encoders.audio.type=audio"};
  all.insert(all.end(), overrides.begin(), overrides.end());
  return ParseConfig("", "test.yaml", all);
}

}  // namespace

TEST_CASE("the DP partition is optimal: equal to brute force on small cases", "[partition]") {
  std::mt19937 rng(1);
  std::uniform_real_distribution<double> cost(0.0, 10.0);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 9);
    const int k = 1 + static_cast<int>(rng() % std::min(n, 4));
    std::vector<double> costs(n);
    for (double& c : costs) c = trial % 5 == 0 ? std::floor(cost(rng)) : cost(rng);  // ties too
    const Partition p = MinBottleneckPartition(costs, k);
    INFO("n=" << n << " k=" << k);
    REQUIRE(static_cast<int>(p.boundaries.size()) == k + 1);
    CHECK(p.boundaries.front() == 0);
    CHECK(p.boundaries.back() == n);
    for (int s = 0; s < k; ++s) CHECK(p.boundaries[s] < p.boundaries[s + 1]);  // non-empty stages
    CHECK(p.bottleneck == Approx(Bottleneck(costs, p.boundaries)));
    CHECK(p.bottleneck == Approx(BruteForce(costs, k)));
    CHECK(p.bottleneck <= UniformPartition(costs, k).bottleneck + 1e-9);
  }
}

TEST_CASE("the front-loaded partition is the lexicographically largest optimal one", "[partition]") {
  std::mt19937 rng(2);
  std::uniform_real_distribution<double> cost(0.0, 10.0);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 9);
    const int k = 1 + static_cast<int>(rng() % std::min(n, 4));
    std::vector<double> costs(n);
    for (double& c : costs) c = trial % 3 == 0 ? std::floor(cost(rng) / 3) : cost(rng);  // many ties
    const double optimum = MinBottleneckPartition(costs, k).bottleneck;
    std::vector<int> largest;
    ForEachPartition(n, k, [&](const std::vector<int>& b) {
      if (Bottleneck(costs, b) <= optimum * (1 + 1e-12)) largest = std::max(largest, b);
    });
    const Partition p = FrontLoadedPartition(costs, k, optimum);
    INFO("n=" << n << " k=" << k);
    CHECK(p.boundaries == largest);
    CHECK(p.bottleneck == Approx(optimum));
  }
  CHECK(FrontLoadedPartition({1, 1, 1, 1, 1, 1}, 3, 3).boundaries == std::vector<int>{0, 3, 5, 6});
  CHECK_THROWS(FrontLoadedPartition({1, 1, 1, 1}, 2, 1.5));
}

TEST_CASE("uniform partition: equal layer counts, remainder to the first stages", "[partition]") {
  const Partition p = UniformPartition(std::vector<double>(10, 1.0), 3);
  CHECK(p.boundaries == std::vector<int>{0, 4, 7, 10});
  CHECK(p.bottleneck == 4.0);
}

TEST_CASE("backward cost: 2F trainable, F frozen with trainable upstream, 0 frozen with none", "[cost]") {
  // vision: frozen encoder, trainable projector; audio: frozen encoder and projector; LLM frozen.
  const Config c = TwoEncoders({"model.encoders.vision.frozen=true", "model.encoders.audio.frozen=true",
                                "model.encoders.audio.projector.frozen=true", "model.llm.frozen=true"});
  const ModelSpec spec = BuildModelSpec(c.model);
  std::vector<double> forward(spec.layers.size());
  for (size_t i = 0; i < forward.size(); ++i) forward[i] = 1.0 + static_cast<double>(i);
  const std::vector<LayerCost> costs = FrozenAwareCosts(spec, forward);
  for (size_t i = 0; i < costs.size(); ++i) {
    const std::string& name = spec.layers[i].name;
    INFO(name);
    double expected = 0;
    if (name == "projector.vision") expected = 2 * forward[i];
    else if (name.rfind("llm.", 0) == 0) expected = forward[i];  // frozen, but the vision projector trains
    CHECK(costs[i].backward == expected);
  }
  for (const LayerCost& l : FrozenUnawareCosts(forward)) CHECK(l.backward == 2 * l.forward);
}

TEST_CASE("FLOP estimate of a decoder block equals the hand count", "[cost]") {
  const Config c = TwoEncoders({});  // llm: hidden 128, 4 heads, 2 kv heads, ff 352
  const ModelSpec spec = BuildModelSpec(c.model);
  const std::vector<double> flops = EstimateForwardFlops(c.model, spec, 64);
  const int block = spec.chains[spec.llm_chain()].begin + 1;
  // q, o: 2*64*128*128 each; k, v: 2*64*128*64 each; causal QK^T and PV: 4*(64*65/2)*128; SwiGLU: 3*2*64*128*352.
  const double expected = 2.0 * 64 * 128 * (2 * 128 + 2 * 64) + 4.0 * (64 * 65 / 2) * 128 + 3 * 2.0 * 64 * 128 * 352;
  CHECK(flops[block] == expected);
  // Vision patch embedding: 16 patches x (3*8*8 inputs) x 64 outputs x 2.
  CHECK(flops[0] == 2.0 * 16 * 192 * 64);
}

TEST_CASE("frozen-aware partitioning beats uniform layer counts when a frozen encoder shares the chain", "[partition]") {
  // LLaVA-like: a frozen 24-block vision tower with a trainable projector in front of a trainable LLM, on 4
  // stages of one chain (the colocated layout): frozen layers cost F only, so they deserve more layers.
  const Config c = ParseConfig("", "test.yaml",
                               {"model.encoders.vision.type=vision", "model.encoders.vision.num_layers=24",
                                "model.encoders.vision.hidden_size=256", "model.encoders.vision.intermediate_size=1024",
                                "model.encoders.vision.frozen=true", "model.llm.num_layers=8", "data.seq_len=64"});
  const ModelSpec spec = BuildModelSpec(c.model);
  const std::vector<double> forward = EstimateForwardFlops(c.model, spec, 64);
  std::vector<double> aware, unaware;
  for (const LayerCost& l : FrozenAwareCosts(spec, forward)) aware.push_back(l.total());
  const Partition dp = MinBottleneckPartition(aware, 4);
  const Partition uniform = UniformPartition(aware, 4);
  for (const LayerCost& l : FrozenUnawareCosts(forward)) unaware.push_back(l.total());
  const Partition blind = MinBottleneckPartition(unaware, 4);  // balanced on the wrong costs
  CHECK(dp.bottleneck < uniform.bottleneck);
  CHECK(dp.bottleneck < Bottleneck(aware, blind.boundaries));
}
