#include "cornstarch/pipeline/planner.h"

#include <cmath>
#include <functional>
#include <limits>

#include "cornstarch/pipeline/partitioner.h"
#include "cornstarch/util/check.h"

namespace cornstarch {

const char* PlanModeName(PlanMode mode) {
  switch (mode) {
    case PlanMode::kFrozenAware: return "frozen_aware";
    case PlanMode::kUniform: return "uniform";
    case PlanMode::kColocated: return "colocated";
  }
  return "?";
}

namespace {

StagePlan MakeStage(const std::vector<int>& layers, const std::vector<LayerCost>& costs) {
  StagePlan s;
  s.layers = layers;
  for (int l : layers) s.forward += costs[l].forward, s.backward += costs[l].backward;
  return s;
}

std::vector<int> Range(int begin, int end) {
  std::vector<int> r;
  for (int i = begin; i < end; ++i) r.push_back(i);
  return r;
}

// Cuts layers [begin, end) into k stages.
std::vector<StagePlan> CutChain(int begin, int end, int k, const std::vector<LayerCost>& costs, PlanMode mode) {
  std::vector<double> totals;
  for (int i = begin; i < end; ++i) totals.push_back(costs[i].total());
  const Partition p = mode == PlanMode::kUniform ? UniformPartition(totals, k) : MinBottleneckPartition(totals, k);
  std::vector<StagePlan> stages;
  for (int s = 0; s < k; ++s) stages.push_back(MakeStage(Range(begin + p.boundaries[s], begin + p.boundaries[s + 1]), costs));
  return stages;
}

void Finish(PipelinePlan& plan, int microbatches, double transfer) {
  std::vector<bool> has_backward;
  std::vector<double> fwd, bwd;
  for (const StagePlan& s : plan.stages) {
    has_backward.push_back(s.backward > 0);
    fwd.push_back(s.forward);
    bwd.push_back(s.backward);
    plan.bottleneck = std::max(plan.bottleneck, s.forward + s.backward);
  }
  plan.graph = MakeStageGraph(plan.encoder_stages, plan.llm_stages, has_backward);
  plan.schedule = Generate1F1B(plan.graph, microbatches);
  ValidateSchedule(plan.graph, plan.schedule, microbatches);
  plan.timeline = Simulate(plan.graph, plan.schedule, fwd, bwd, transfer);
}

}  // namespace

PipelinePlan PlanPipeline(const ModelSpec& spec, const std::vector<LayerCost>& costs, int num_stages,
                          int microbatches, PlanMode mode, double transfer) {
  CS_CHECK(costs.size() == spec.layers.size(), costs.size(), " costs for ", spec.layers.size(), " layers");
  const int encoders = spec.llm_chain();
  const ChainSpec& llm = spec.chains[spec.llm_chain()];
  if (mode == PlanMode::kColocated) {
    if (num_stages < 1 || num_stages > llm.end - llm.begin) {
      throw Error("parallel.pp: the colocated layout needs 1.." + std::to_string(llm.end - llm.begin) +
                  " stages, got " + std::to_string(num_stages));
    }
    // Stage 0 runs every encoder, then its share of the LLM; the LLM is cut by layer counts, blind to the
    // encoders' cost and to freezing, as LLM-centric trainers do.
    const std::vector<StagePlan> llm_cut = CutChain(llm.begin, llm.end, num_stages, costs, PlanMode::kUniform);
    PipelinePlan plan;
    plan.mode = mode;
    plan.llm_stages = num_stages;
    for (int s = 0; s < num_stages; ++s) {
      std::vector<int> layers = s == 0 ? Range(0, llm.begin) : std::vector<int>{};
      layers.insert(layers.end(), llm_cut[s].layers.begin(), llm_cut[s].layers.end());
      plan.stages.push_back(MakeStage(layers, costs));
    }
    Finish(plan, microbatches, transfer);
    return plan;
  }
  if (num_stages < encoders + 1) {
    throw Error("parallel.pp: " + std::string(PlanModeName(mode)) + " needs at least one stage per encoder and one " +
                "for the LLM (" + std::to_string(encoders + 1) + "), got " + std::to_string(num_stages) +
                "; use more ranks or parallel.pipeline=colocated");
  }
  // Every split of the stage budget: k_c >= 1 stages per chain, no more stages than layers, sum = num_stages.
  PipelinePlan best;
  double best_makespan = std::numeric_limits<double>::infinity();
  std::vector<int> split(encoders + 1, 0);
  std::function<void(int, int)> search = [&](int chain, int left) {
    const ChainSpec& c = spec.chains[chain];
    const int max_here = std::min(c.end - c.begin, left - (encoders - chain));
    if (chain == encoders) {
      if (left < 1 || left > c.end - c.begin) return;
      split[chain] = left;
      PipelinePlan plan;
      plan.mode = mode;
      plan.encoder_stages.assign(split.begin(), split.end() - 1);
      plan.llm_stages = left;
      for (int k = 0; k <= encoders; ++k) {
        for (StagePlan& s : CutChain(spec.chains[k].begin, spec.chains[k].end, split[k], costs, mode)) {
          plan.stages.push_back(std::move(s));
        }
      }
      Finish(plan, microbatches, transfer);
      if (plan.timeline.makespan < best_makespan) best_makespan = plan.timeline.makespan, best = std::move(plan);
      return;
    }
    for (int k = 1; k <= max_here; ++k) {
      split[chain] = k;
      search(chain + 1, left - k);
    }
  };
  search(0, num_stages);
  if (!std::isfinite(best_makespan)) {
    throw Error("parallel.pp: " + std::to_string(num_stages) + " stages cannot be filled: the chains have fewer layers");
  }
  return best;
}

PlanMode ParsePlanMode(const std::string& name) {
  if (name == "uniform") return PlanMode::kUniform;
  if (name == "colocated") return PlanMode::kColocated;
  CS_CHECK(name == "frozen_aware", "plan mode ", name);
  return PlanMode::kFrozenAware;
}

int MicrobatchesPerStep(const Config& config) {
  const TrainConfig& t = config.train;
  return static_cast<int>(t.global_batch_size / (t.micro_batch_size * config.parallel.dp));
}

std::vector<LayerCost> MicrobatchCosts(const Config& config, const ModelSpec& spec) {
  std::vector<double> forward = EstimateForwardFlops(config.model, spec, config.data.seq_len);
  for (double& f : forward) f *= static_cast<double>(config.train.micro_batch_size);
  return FrozenAwareCosts(spec, forward);
}

PipelinePlan PlanFromConfig(const Config& config, const ModelSpec& spec) {
  const int pp = static_cast<int>(config.parallel.pp);
  const PlanMode mode = pp == 1 ? PlanMode::kColocated : ParsePlanMode(config.parallel.pipeline);
  return PlanPipeline(spec, MicrobatchCosts(config, spec), pp, MicrobatchesPerStep(config), mode);
}

std::vector<StageSet> StageSetsOf(const PipelinePlan& plan, const ModelSpec& spec) {
  std::vector<StageSet> sets;
  for (size_t c = 0; c < plan.encoder_stages.size(); ++c) sets.push_back({spec.chains[c].name, plan.encoder_stages[c]});
  sets.push_back({"llm", plan.llm_stages});
  return sets;
}

}  // namespace cornstarch
