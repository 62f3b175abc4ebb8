#include <catch2/catch.hpp>
#include <set>

#include "cornstarch/plan/config.h"
#include "cornstarch/plan/planner.h"
#include "cornstarch/base/check.h"

using namespace cornstarch;

namespace {

// LLaVA-like: a frozen vision tower (trainable projector) about as heavy as the trainable LLM, as in the paper's
// models; optionally a frozen audio encoder with a frozen projector (no backward at all).
Config Llava(bool with_audio) {
  std::vector<std::string> o = {"model.encoders.vision.type=vision", "model.encoders.vision.num_layers=24",
                                "model.encoders.vision.hidden_size=256", "model.encoders.vision.intermediate_size=1024",
                                "model.encoders.vision.image_size=64", "model.encoders.vision.frozen=true",
                                "model.llm.num_layers=8", "data.seq_len=128"};
  if (with_audio) {
    for (const char* s : {"model.encoders.audio.type=audio", "model.encoders.audio.num_layers=12",
                          "model.encoders.audio.hidden_size=128", "model.encoders.audio.intermediate_size=512",
                          "model.encoders.audio.num_frames=64", "model.encoders.audio.frozen=true",
                          "model.encoders.audio.projector.frozen=true"}) {
      o.push_back(s);
    }
  }
  return ParseConfig("", "test.yaml", o);
}

std::vector<LayerCost> Costs(const Config& c, const ModelSpec& spec) {
  return FrozenAwareCosts(spec, EstimateForwardFlops(c.model, spec, c.data.seq_len));
}

}  // namespace

TEST_CASE("every plan places each layer exactly once, chains in order, on the requested stages", "[planner]") {
  for (bool audio : {false, true}) {
    const Config c = Llava(audio);
    const ModelSpec spec = BuildModelSpec(c.model);
    const std::vector<LayerCost> costs = Costs(c, spec);
    for (PlanMode mode : {PlanMode::kFrozenAware, PlanMode::kUniform, PlanMode::kColocated}) {
      for (int stages = 3; stages <= 6; ++stages) {
        INFO(NameOf(mode) << " stages " << stages << " audio " << audio);
        const PipelinePlan plan = PlanPipeline(spec, costs, stages, 8, mode);
        REQUIRE(static_cast<int>(plan.stages.size()) == stages);
        std::vector<int> seen;
        for (const StagePlan& s : plan.stages) {
          CHECK(!s.layers.empty());
          seen.insert(seen.end(), s.layers.begin(), s.layers.end());
        }
        std::vector<int> all(spec.layers.size());
        for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
        CHECK(seen == all);
        // Encoders on stages of their own (uniform always; frozen-aware when that simulates faster), or all on
        // the first LLM stage.
        if (!plan.encoder_stages.empty() || mode == PlanMode::kUniform) {
          CHECK(static_cast<int>(plan.encoder_stages.size()) == spec.llm_chain());
          for (int k : plan.encoder_stages) CHECK(k >= 1);
        } else {
          CHECK(plan.llm_stages == stages);
          CHECK(plan.stages[0].layers.front() == 0);
          CHECK(plan.stages[0].layers.size() > static_cast<size_t>(spec.chains.back().begin));
        }
        // A frozen encoder with a frozen projector has no backward at all.
        if (audio && !plan.encoder_stages.empty()) {
          const int audio_stage = plan.encoder_stages[0];
          CHECK_FALSE(plan.graph.has_backward[audio_stage]);
        }
      }
    }
  }
}

TEST_CASE("frozen-aware plans beat uniform layer counts and colocated encoders on LLaVA-like layouts", "[planner]") {
  for (bool audio : {false, true}) {
    const Config c = Llava(audio);
    const ModelSpec spec = BuildModelSpec(c.model);
    const std::vector<LayerCost> costs = Costs(c, spec);
    for (int stages : {4, 6}) {
      INFO("stages " << stages << " audio " << audio);
      const double aware = PlanPipeline(spec, costs, stages, 16, PlanMode::kFrozenAware).timeline.makespan;
      const double uniform = PlanPipeline(spec, costs, stages, 16, PlanMode::kUniform).timeline.makespan;
      const double colocated = PlanPipeline(spec, costs, stages, 16, PlanMode::kColocated).timeline.makespan;
      INFO("makespan aware " << aware << " uniform " << uniform << " colocated " << colocated);
      CHECK(aware <= uniform);
      CHECK(aware < colocated);
    }
  }
}

TEST_CASE("frozen-aware is never slower in simulation than either baseline", "[planner]") {
  for (bool audio : {false, true}) {
    const Config c = Llava(audio);
    const ModelSpec spec = BuildModelSpec(c.model);
    const std::vector<LayerCost> costs = Costs(c, spec);
    for (int stages = audio ? 3 : 2; stages <= 10; ++stages) {
      for (int m : {1, 4, 16}) {
        INFO("stages " << stages << " microbatches " << m << " audio " << audio);
        const double aware = PlanPipeline(spec, costs, stages, m, PlanMode::kFrozenAware).timeline.makespan;
        CHECK(aware <= PlanPipeline(spec, costs, stages, m, PlanMode::kUniform).timeline.makespan);
        CHECK(aware <= PlanPipeline(spec, costs, stages, m, PlanMode::kColocated).timeline.makespan);
      }
    }
  }
}

TEST_CASE("too few stages for separate encoder stages: uniform refuses, frozen-aware colocates", "[planner]") {
  const Config c = Llava(true);
  const ModelSpec spec = BuildModelSpec(c.model);
  CHECK_THROWS_WITH(PlanPipeline(spec, Costs(c, spec), 2, 4, PlanMode::kUniform),
                    "parallel.pp: uniform needs at least one stage per encoder and one for the LLM (3), got 2; "
                    "use more ranks or parallel.pipeline=frozen_aware or colocated");
  const PipelinePlan plan = PlanPipeline(spec, Costs(c, spec), 2, 4, PlanMode::kFrozenAware);
  CHECK(plan.encoder_stages.empty());
  CHECK(plan.stages.size() == 2);
  CHECK_THROWS_WITH(PlanPipeline(spec, Costs(c, spec), 100, 4, PlanMode::kFrozenAware),
                    "parallel.pp: 100 stages cannot be filled: the chains have fewer layers");
}

TEST_CASE("frozen-aware placement is no worse than the colocated baseline with a heavy frozen encoder", "[planner]") {
  // A heavy frozen encoder: whether frozen-aware keeps it on stage 0 (then with fewer LLM layers there than the
  // count-based baseline) or gives it a stage of its own, the slowest stage and the step are no worse.
  const Config c = ParseConfig("", "test.yaml", {"model.encoders.vision.type=vision", "model.encoders.vision.num_layers=12",
                                                 "model.encoders.vision.hidden_size=256", "model.llm.num_layers=8",
                                                 "model.encoders.vision.frozen=true", "data.seq_len=128"});
  const ModelSpec spec = BuildModelSpec(c.model);
  const std::vector<LayerCost> costs = Costs(c, spec);
  const PipelinePlan baseline = PlanPipeline(spec, costs, 2, 8, PlanMode::kColocated);
  const PipelinePlan aware = PlanPipeline(spec, costs, 2, 8, PlanMode::kFrozenAware);
  CHECK(aware.timeline.makespan <= baseline.timeline.makespan);
  CHECK(aware.bottleneck <= baseline.bottleneck);
}

TEST_CASE("stage memory: weights, optimizer state of trainable layers, activations of in-flight microbatches", "[planner]") {
  const Config c = Llava(false);
  const ModelSpec spec = BuildModelSpec(c.model);
  const PipelinePlan plan = PlanPipeline(spec, Costs(c, spec), 3, 8, PlanMode::kUniform);
  std::vector<LayerMemory> memory(spec.layers.size());
  for (size_t l = 0; l < memory.size(); ++l) memory[l] = {1000.0 + static_cast<double>(l), 7.0};
  const std::vector<double> bytes = StageMemoryBytes(plan, spec, memory);
  REQUIRE(bytes.size() == 3);
  for (int s = 0; s < 3; ++s) {
    // 1F1B holds as many microbatches between forward and backward as there are stages to the loss.
    int depth = 1;
    for (int t = s; !plan.graph.next[t].empty(); t = plan.graph.next[t][0]) ++depth;
    const int in_flight = plan.graph.has_backward[s] ? std::min(8, depth) : 0;
    double expected = 0;
    for (int l : plan.stages[s].layers) {
      expected += memory[l].parameters * (spec.layers[l].trainable ? 16 : 4) + in_flight * memory[l].activation_bytes;
    }
    INFO("stage " << s);
    CHECK(bytes[s] == Approx(expected));
  }
}
