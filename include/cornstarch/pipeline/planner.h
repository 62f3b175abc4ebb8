// Places the model's layers on pipeline stages and predicts the step. Three modes:
//   frozen_aware  each encoder chain and the LLM get their own stages; every split of the stage budget between
//                 the chains is tried, each chain is cut by the exact min-bottleneck partition of its frozen-aware
//                 costs, and the split with the shortest simulated 1F1B step wins (the paper gives no rule for
//                 the split; enumerating it is cheap).
//   uniform       the same stage budget search, but equal layer counts per stage within each chain.
//   colocated     the LLM-centric baseline (Megatron-style): one chain of stages; every encoder runs on the first
//                 stage, and the LLM is cut into equal layer counts, blind to the encoders' cost and to freezing.
// Pure: costs come in, a plan comes out.
#pragma once

#include <string>
#include <vector>

#include "cornstarch/model/model_spec.h"
#include "cornstarch/pipeline/cost_model.h"
#include "cornstarch/pipeline/schedule.h"

namespace cornstarch {

enum class PlanMode { kFrozenAware, kUniform, kColocated };
const char* PlanModeName(PlanMode mode);

struct StagePlan {
  std::vector<int> layers;  // indices into ModelSpec::layers, in execution order
  double forward = 0, backward = 0;
};

struct PipelinePlan {
  PlanMode mode = PlanMode::kFrozenAware;
  std::vector<int> encoder_stages;  // stages per encoder chain (empty when colocated)
  int llm_stages = 0;
  std::vector<StagePlan> stages;    // encoders' stages first, then the LLM's
  StageGraph graph;
  Schedule schedule;
  Timeline timeline;
  double bottleneck = 0;            // max over stages of forward + backward
};

// REQUIRES: num_stages >= number of chains for the separated modes (each chain needs a stage), >= 1 colocated;
// throws Error naming parallel.pp otherwise.
PipelinePlan PlanPipeline(const ModelSpec& spec, const std::vector<LayerCost>& costs, int num_stages,
                          int microbatches, PlanMode mode, double transfer = 0.0);

}  // namespace cornstarch
