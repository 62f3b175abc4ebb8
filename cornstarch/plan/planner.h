// Places the model's layers on pipeline stages and predicts the step. Three modes:
//   frozen_aware  the shortest simulated 1F1B step, on frozen-aware costs, over every placement of the stage
//                 budget: each encoder chain and the LLM on stages of their own (every split of the budget between
//                 the chains), or every encoder on the first LLM stage (what wins when the encoders are cheap next
//                 to the LLM); and over every cut of the chains: the exact min-bottleneck partition (as the DP
//                 returns it, and with the slack moved to the last stages) and equal layer counts, since 1F1B's
//                 ramps care about more than the slowest stage. The paper gives no rule for the split;
//                 enumerating it is cheap. Never slower in simulation than the two baselines.
//   uniform       each chain on stages of its own, the same search over splits, equal layer counts per stage.
//   colocated     the LLM-centric baseline (Megatron-style): one chain of stages; every encoder runs on the first
//                 stage, and the LLM is cut into equal layer counts, blind to the encoders' cost and to freezing.
//   frozen_unaware  the frozen-aware search on costs blind to freezing (backward = 2 x forward for every layer, as
//                 LLM trainers assume), then timed on the true costs: what frozen-awareness alone is worth.
// Under interleaving (v virtual stages) the LLM's share of the ranks, p of them, gets p v stages, cut by the same
// rules, stage j on LLM rank j mod p; the search skips splits that leave the LLM one rank or microbatches that do
// not fit the rounds (InterleavingFits). Pure: costs come in, a plan comes out.
#pragma once

#include <string>
#include <vector>

#include "cornstarch/plan/config.h"
#include "cornstarch/plan/model_spec.h"
#include "cornstarch/plan/cost_model.h"
#include "cornstarch/plan/schedule.h"

namespace cornstarch {

struct StagePlan {
  std::vector<int> layers;  // indices into ModelSpec::layers, in execution order
  double forward = 0, backward = 0;
};

struct PipelinePlan {
  PlanMode mode = PlanMode::kFrozenAware;
  std::vector<int> encoder_stages;  // stages per encoder chain (empty: encoders on the first LLM stage)
  int llm_stages = 0;               // virtual_stages per LLM rank
  int virtual_stages = 1;
  std::vector<StagePlan> stages;    // encoders' stages first, then the LLM's
  StageGraph graph;
  Schedule schedule;
  Timeline timeline;
  double bottleneck = 0;            // max over stages of forward + backward
};

// `num_ranks` pipeline ranks. Throws Error naming parallel.pp when the stages cannot be filled (uniform: fewer
// ranks than chains; any mode: more stages than layers; interleaved: no split that fits).
PipelinePlan PlanPipeline(const ModelSpec& spec, const std::vector<LayerCost>& costs, int num_ranks,
                          int microbatches, PlanMode mode, double transfer = 0.0, int virtual_stages = 1);

// The layers pipeline rank `rank` runs: those of its stages, in model order.
std::vector<int> LayersOfRank(const PipelinePlan& plan, int rank);

// Microbatches per step on one data-parallel rank: global_batch_size / (micro_batch_size * dp).
int MicrobatchesPerStep(const Config& config);

// Frozen-aware costs of one microbatch (micro_batch_size sequences of data.seq_len) from the FLOP estimate:
// deterministic, so every rank derives the same plan without talking to the others. `loads`: what the data
// holds per encoder (instances per sample, their mean tokens and pairs); empty: one config-sized instance each.
std::vector<LayerCost> MicrobatchCosts(const Config& config, const ModelSpec& spec,
                                       const std::vector<InstanceLoad>& loads = {});

// Frozen-aware costs of one microbatch from `seconds`, each layer's profiled forward (train/profiler.h, which runs
// one config-sized instance per sample of each encoder), scaled to what the data holds by the FLOP estimate's ratio
// of `loads` to that nominal load: the profile gives each layer's rate, the data its work (its fixed costs, such as
// op dispatch, scale with it too: an over-estimate for several small instances in one call).
std::vector<LayerCost> ProfiledCosts(const Config& config, const ModelSpec& spec, std::vector<double> seconds,
                                     const std::vector<InstanceLoad>& loads);

// Whether layer `layer` is split over the tp ranks: every LLM layer, and the blocks and projector of a tower with
// model.encoders.<name>.tp.
bool SplitOverTp(const ModelConfig& model, const ModelSpec& spec, int layer);

// What each rank of a tensor-parallel group of `tp` and a context-parallel group of `cp` spends on each layer: the
// LLM's layers, and the blocks and projector of each tower with model.encoders.<name>.tp, are split over the tp
// group; the LLM's layers also over the cp group, each of whose ranks holds 1/cp of the tokens (balanced in
// attention work), while every cp rank runs the towers on whole samples. Compute only: placement balances it, and
// the whole-layout cost model (plan/layout_search.h) adds the tp and cp collectives on top.
std::vector<LayerCost> PerRank(const ModelConfig& model, const ModelSpec& spec, std::vector<LayerCost> costs,
                               int64_t tp, int64_t cp);

// The plan a run executes: parallel.pp ranks (parallel.virtual_stages LLM stages each under the interleaved
// schedule) placed as parallel.pipeline says on PerRank of `costs` (one microbatch's, of the whole layers);
// pp = 1 is one stage holding every layer, whatever the mode.
PipelinePlan PlanFromConfig(const Config& config, const ModelSpec& spec, const std::vector<LayerCost>& costs);

// Peak bytes of each pipeline rank under the plan's schedule: fp32 weights, for trainable parameters also the
// gradient and AdamW's two moments, and the activations its stages hold between a microbatch's forward and
// backward, at the schedule's fullest moment (a backward's working gradients included).
std::vector<double> RankMemoryBytes(const PipelinePlan& plan, const ModelSpec& spec,
                                    const std::vector<LayerMemory>& memory);

// "vision:1 audio:1 llm:2" (stages per chain), or "encoders+llm:2" when the encoders share the first LLM stage;
// interleaved, the LLM's as "llm:4 on 2 ranks".
std::string DescribeStages(const PipelinePlan& plan, const ModelSpec& spec);

}  // namespace cornstarch
