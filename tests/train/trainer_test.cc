// End-to-end single-process training: freezing, learning from the modalities, determinism.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <map>
#include <set>
#include <numeric>

#include "cornstarch/plan/config.h"
#include "cornstarch/data/synthetic_dataset.h"
#include "cornstarch/model/multimodal_model.h"
#include "cornstarch/train/adamw.h"
#include "cornstarch/train/trainer.h"

using namespace cornstarch;

namespace {

Config TinyConfig(std::vector<std::string> overrides) {
  overrides.push_back("logging.metrics_path=");
  overrides.push_back("logging.level=warn");
  return LoadConfig("configs/tiny.yaml", overrides);
}

double MeanLoss(const std::vector<StepMetrics>& h, size_t first, size_t last) {
  double sum = 0;
  for (size_t i = first; i < last; ++i) sum += h[i].loss;
  return sum / (last - first);
}

}  // namespace

TEST_CASE("frozen modules keep their weights, get no gradients and no optimizer state", "[train][freeze]") {
  // vision: encoder and projector frozen (no graph at all); audio: encoder frozen, projector trains.
  Trainer trainer(TinyConfig({"train.steps=5", "optimizer.warmup_steps=1", "model.encoders.vision.frozen=true",
                              "model.encoders.vision.projector.frozen=true", "model.encoders.audio.frozen=true"}));
  std::map<std::string, torch::Tensor> before;
  for (const auto& [name, p] : trainer.model().NamedParameters()) before[name] = p.detach().clone();
  for (int i = 0; i < 5; ++i) trainer.Step();

  std::set<const void*> with_state;
  for (const torch::Tensor& p : trainer.optimizer().params()) with_state.insert(p.unsafeGetTensorImpl());
  int frozen = 0, trained = 0;
  for (const auto& [name, p] : trainer.model().NamedParameters()) {
    INFO(name);
    const bool is_frozen = name.rfind("encoder.", 0) == 0 || name.rfind("projector.vision", 0) == 0;
    if (is_frozen) {
      ++frozen;
      CHECK_FALSE(p.requires_grad());
      CHECK_FALSE(p.grad().defined());
      CHECK(with_state.count(p.unsafeGetTensorImpl()) == 0);
      CHECK(torch::equal(p, before[name]));  // bitwise unchanged
    } else {
      ++trained;
      CHECK(p.requires_grad());
      CHECK(with_state.count(p.unsafeGetTensorImpl()) == 1);
      // Every trainable matrix moved (norm gains may legitimately stay near 1, so check matrices).
      if (p.dim() >= 2) CHECK_FALSE(torch::equal(p, before[name]));
    }
  }
  CHECK(frozen > 0);
  CHECK(trained > 0);
  CHECK(static_cast<int>(trainer.optimizer().params().size()) == trained);
}

TEST_CASE("a frozen chain with nothing trainable upstream builds no autograd graph", "[train][freeze]") {
  Config cfg = TinyConfig({"model.encoders.vision.frozen=true", "model.encoders.vision.projector.frozen=true",
                           "model.encoders.audio.frozen=true", "model.llm.frozen=true"});
  const ModelSpec spec = BuildModelSpec(cfg.model);
  MultimodalModel model(cfg.model, 0);
  Trainer trainer(cfg);  // the audio projector alone trains
  for (const LayerSpec& l : spec.layers) {
    INFO(l.name);
    // The LLM is frozen but must pass the audio projector's gradient back, so it keeps a graph.
    CHECK(l.needs_graph == (l.name == "projector.audio" || l.name.rfind("llm.", 0) == 0));
  }
  SyntheticDataset data(cfg.model, cfg.data, 0);
  const Batch batch = data.Get(0, 2);
  ForwardContext ctx = model.MakeContext(batch);
  for (int c = 0; c < spec.llm_chain(); ++c) {
    torch::Tensor x = batch.modalities[c].inputs;
    for (int i = spec.chains[c].begin; i < spec.chains[c].end; ++i) {
      x = model.RunLayer(i, x, ctx);
      INFO(spec.layers[i].name);
      CHECK(x.requires_grad() == spec.layers[i].needs_graph);
      CHECK((x.grad_fn() != nullptr) == spec.layers[i].needs_graph);
    }
  }
  const StepMetrics m = trainer.Step();
  CHECK(m.grad_norm > 0);
}

TEST_CASE("the tiny config learns, and only because it reads the modalities", "[train][learning]") {
  Trainer normal(TinyConfig({}));
  const std::vector<StepMetrics> h = normal.Run();
  Trainer blind(TinyConfig({"data.zero_modality_inputs=true"}));
  const std::vector<StepMetrics> hb = blind.Run();
  REQUIRE(h.size() >= 20);
  const double start = h.front().loss;
  const double end = MeanLoss(h, h.size() - 10, h.size());
  const double blind_end = MeanLoss(hb, hb.size() - 10, hb.size());
  INFO("start " << start << " end " << end << " blind end " << blind_end);
  CHECK(end <= 0.5 * start);
  // Without the modalities the answers are guesses: at least 2 ln(8) / 4 = 1.04 nats per labelled token.
  CHECK(blind_end > 0.9);
  CHECK(end < 0.6 * blind_end);
}

TEST_CASE("two runs with the same seed give identical losses; another seed differs", "[train][determinism]") {
  auto losses = [](const std::string& seed) {
    Trainer t(TinyConfig({"train.steps=6", "optimizer.warmup_steps=2", "train.seed=" + seed}));
    std::vector<double> out;
    for (const StepMetrics& m : t.Run()) out.push_back(m.loss);
    return out;
  };
  const std::vector<double> a = losses("7"), b = losses("7"), c = losses("8");
  CHECK(a == b);
  CHECK(a != c);
}
