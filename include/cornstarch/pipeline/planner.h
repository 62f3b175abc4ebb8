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

#include "cornstarch/config/config.h"
#include "cornstarch/dist/parallel_dims.h"
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

// REQUIRES: a validated parallel.pipeline value.
PlanMode ParsePlanMode(const std::string& name);

// Microbatches per step on one data-parallel rank: global_batch_size / (micro_batch_size * dp).
int MicrobatchesPerStep(const Config& config);

// Frozen-aware costs of one microbatch (micro_batch_size sequences of data.seq_len) from the FLOP estimate:
// deterministic, so every rank derives the same plan without talking to the others.
std::vector<LayerCost> MicrobatchCosts(const Config& config, const ModelSpec& spec);

// The plan a run executes: parallel.pp stages placed as parallel.pipeline says; pp = 1 is one stage holding
// every layer, whatever the mode.
PipelinePlan PlanFromConfig(const Config& config, const ModelSpec& spec);

// The stage sets of a plan for ParallelDims: one per encoder chain, then "llm" (only "llm" when colocated).
std::vector<StageSet> StageSetsOf(const PipelinePlan& plan, const ModelSpec& spec);

}  // namespace cornstarch
