#include <catch2/catch.hpp>
#include <set>

#include "cornstarch/config/config.h"
#include "cornstarch/pipeline/planner.h"
#include "cornstarch/util/check.h"

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
        INFO(PlanModeName(mode) << " stages " << stages << " audio " << audio);
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
        if (mode != PlanMode::kColocated) {
          CHECK(static_cast<int>(plan.encoder_stages.size()) == spec.llm_chain());
          for (int k : plan.encoder_stages) CHECK(k >= 1);
        }
        // A frozen encoder with a frozen projector has no backward at all.
        if (audio && mode != PlanMode::kColocated) {
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

TEST_CASE("too few stages for separate encoder stages is a config error", "[planner]") {
  const Config c = Llava(true);
  const ModelSpec spec = BuildModelSpec(c.model);
  CHECK_THROWS_WITH(PlanPipeline(spec, Costs(c, spec), 2, 4, PlanMode::kFrozenAware),
                    "parallel.pp: frozen_aware needs at least one stage per encoder and one for the LLM (3), got 2; "
                    "use more ranks or parallel.pipeline=colocated");
}
