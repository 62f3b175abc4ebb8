#include "cornstarch/plan/planner.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "cornstarch/plan/partitioner.h"
#include "cornstarch/base/check.h"

namespace cornstarch {

namespace {

// How a chain of layer groups is cut into stages: the exact min-bottleneck partition as the DP returns it, the
// optimal one with the slack at the end, or equal counts. Encoders on the first LLM stage either count as part
// of it (kMinBottleneck, kFrontLoaded) or not at all (kUniform: the LLM alone is cut by counts, as LLM-centric
// trainers do).
enum class Cut { kMinBottleneck, kFrontLoaded, kUniform };

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

// One group per layer of [begin, end).
std::vector<std::vector<int>> Singles(int begin, int end) {
  std::vector<std::vector<int>> items;
  for (int i = begin; i < end; ++i) items.push_back({i});
  return items;
}

// Cuts a chain of layer groups (a group always lands on one stage) into k stages.
std::vector<StagePlan> CutItems(const std::vector<std::vector<int>>& items, int k, const std::vector<LayerCost>& costs,
                                Cut cut) {
  std::vector<double> totals;
  for (const std::vector<int>& item : items) {
    double t = 0;
    for (int l : item) t += costs[l].total();
    totals.push_back(t);
  }
  Partition p = cut == Cut::kUniform ? UniformPartition(totals, k) : MinBottleneckPartition(totals, k);
  if (cut == Cut::kFrontLoaded) p = FrontLoadedPartition(totals, k, p.bottleneck);
  std::vector<StagePlan> stages;
  for (int s = 0; s < k; ++s) {
    std::vector<int> layers;
    for (int i = p.boundaries[s]; i < p.boundaries[s + 1]; ++i) {
      layers.insert(layers.end(), items[i].begin(), items[i].end());
    }
    stages.push_back(MakeStage(layers, costs));
  }
  return stages;
}

// The plan's schedule replayed with its stages' forward and backward times.
Timeline SimulatePlan(const PipelinePlan& plan, double transfer) {
  std::vector<double> fwd, bwd;
  for (const StagePlan& s : plan.stages) fwd.push_back(s.forward), bwd.push_back(s.backward);
  return Simulate(plan.graph, plan.schedule, fwd, bwd, transfer);
}

void Finish(PipelinePlan& plan, int microbatches, double transfer) {
  std::vector<bool> has_backward;
  for (const StagePlan& s : plan.stages) has_backward.push_back(s.backward > 0);
  plan.graph = MakeStageGraph(plan.encoder_stages, plan.llm_stages, has_backward, plan.virtual_stages);
  for (int r = 0; r < plan.graph.num_ranks(); ++r) {
    double busy = 0;
    for (int s : plan.graph.StagesOf(r)) busy += plan.stages[s].forward + plan.stages[s].backward;
    plan.bottleneck = std::max(plan.bottleneck, busy);
  }
  plan.schedule = AddSendRecv(plan.graph, Generate1F1B(plan.graph, microbatches));
  ValidateSchedule(plan.graph, plan.schedule, microbatches);
  plan.timeline = SimulatePlan(plan, transfer);
}

// Every encoder on the first stage, ahead of its share of the LLM: one chain of stages.
PipelinePlan Colocated(const ModelSpec& spec, const std::vector<LayerCost>& costs, int num_stages, PlanMode mode,
                       Cut cut, int virtual_stages) {
  const ChainSpec& llm = spec.chains[spec.llm_chain()];
  PipelinePlan plan;
  plan.mode = mode;
  plan.llm_stages = num_stages;
  plan.virtual_stages = virtual_stages;
  if (cut == Cut::kUniform) {
    plan.stages = CutItems(Singles(llm.begin, llm.end), num_stages, costs, cut);
    std::vector<int> layers = Range(0, llm.begin);
    layers.insert(layers.end(), plan.stages[0].layers.begin(), plan.stages[0].layers.end());
    plan.stages[0] = MakeStage(layers, costs);
  } else {
    // The encoders and the LLM's embedding form the first group, so their cost counts where it is paid.
    std::vector<std::vector<int>> items = Singles(llm.begin + 1, llm.end);
    items.insert(items.begin(), Range(0, llm.begin + 1));
    plan.stages = CutItems(items, num_stages, costs, cut);
  }
  return plan;
}

}  // namespace

PipelinePlan PlanPipeline(const ModelSpec& spec, const std::vector<LayerCost>& costs, int num_ranks,
                          int microbatches, PlanMode mode, double transfer, int v) {
  CS_CHECK(costs.size() == spec.layers.size(), costs.size(), " costs for ", spec.layers.size(), " layers");
  CS_CHECK(v >= 1, "virtual stages ", v);
  if (mode == PlanMode::kFrozenUnaware) {
    std::vector<double> forward;
    for (const LayerCost& c : costs) forward.push_back(c.forward);
    PipelinePlan plan =
        PlanPipeline(spec, FrozenUnawareCosts(forward), num_ranks, microbatches, PlanMode::kFrozenAware, transfer, v);
    plan.mode = mode;
    plan.bottleneck = 0;
    for (StagePlan& s : plan.stages) s = MakeStage(s.layers, costs);  // what it placed, at the true costs
    Finish(plan, microbatches, transfer);
    return plan;
  }
  const int encoders = spec.llm_chain();
  const ChainSpec& llm = spec.chains[spec.llm_chain()];
  const int llm_layers = llm.end - llm.begin;
  // Whether `ranks` LLM ranks can hold v stages each: enough layers, and under interleaving the rounds fit.
  auto llm_fits = [&](int ranks) {
    return ranks * v <= llm_layers && (v == 1 || InterleavingFits(ranks, microbatches));
  };
  PipelinePlan best;
  double best_makespan = std::numeric_limits<double>::infinity();
  auto consider = [&](PipelinePlan plan) {
    Finish(plan, microbatches, transfer);
    if (plan.timeline.makespan < best_makespan) best_makespan = plan.timeline.makespan, best = std::move(plan);
  };
  // Frozen-aware keeps the fastest simulated step over every cut, count-based ones included: the exact
  // min-bottleneck cut ignores everything but the slowest stage, and 1F1B's ramps care about the others too.
  const std::vector<Cut> cuts = mode == PlanMode::kFrozenAware
                                    ? std::vector<Cut>{Cut::kMinBottleneck, Cut::kFrontLoaded, Cut::kUniform}
                                    : std::vector<Cut>{Cut::kUniform};
  if (mode == PlanMode::kColocated || (mode == PlanMode::kFrozenAware && encoders > 0)) {
    if (num_ranks >= 1 && llm_fits(num_ranks)) {
      for (Cut cut : cuts) consider(Colocated(spec, costs, num_ranks * v, mode, cut, v));
    } else if (mode == PlanMode::kColocated) {
      throw Error("parallel.pp: the colocated layout needs 1.." + std::to_string(llm_layers / v) + " ranks" +
                  (v > 1 ? " whose microbatches fit interleaving's rounds" : "") + ", got " +
                  std::to_string(num_ranks));
    }
  }
  if (mode != PlanMode::kColocated) {
    if (num_ranks < encoders + 1 && mode == PlanMode::kUniform) {
      throw Error("parallel.pp: uniform needs at least one stage per encoder and one for the LLM (" +
                  std::to_string(encoders + 1) + "), got " + std::to_string(num_ranks) +
                  "; use more ranks or parallel.pipeline=frozen_aware or colocated");
    }
    // Every split of the stage budget: k_c >= 1 stages per chain, no more stages than layers, sum = num_stages.
    std::vector<int> split(encoders + 1, 0);
    std::function<void(int, int)> search = [&](int chain, int left) {
      const ChainSpec& c = spec.chains[chain];
      if (chain == encoders) {
        if (left < 1 || !llm_fits(left)) return;
        split[chain] = left * v;
        for (Cut cut : cuts) {
          PipelinePlan plan;
          plan.mode = mode;
          plan.encoder_stages.assign(split.begin(), split.end() - 1);
          plan.llm_stages = left * v;
          plan.virtual_stages = v;
          for (int k = 0; k <= encoders; ++k) {
            for (StagePlan& s : CutItems(Singles(spec.chains[k].begin, spec.chains[k].end), split[k], costs, cut)) {
              plan.stages.push_back(std::move(s));
            }
          }
          consider(std::move(plan));
        }
        return;
      }
      for (int k = 1; k <= std::min(c.end - c.begin, left - (encoders - chain)); ++k) {
        split[chain] = k;
        search(chain + 1, left - k);
      }
    };
    search(0, num_ranks);
  }
  if (!std::isfinite(best_makespan)) {
    throw Error("parallel.pp: " + std::to_string(num_ranks) + " ranks cannot be filled" +
                (v > 1 ? " with " + std::to_string(v) + " virtual stages each: the LLM needs at least two ranks, as "
                         "many layers as stages, and microbatches per step (" + std::to_string(microbatches) +
                         ") that split into rounds over its ranks (change train.global_batch_size, "
                         "train.micro_batch_size or parallel.virtual_stages)"
                       : std::string(": the chains have fewer layers")));
  }
  return best;
}

std::vector<int> LayersOfRank(const PipelinePlan& plan, int rank) {
  std::vector<int> layers;
  for (int s : plan.graph.StagesOf(rank)) {
    layers.insert(layers.end(), plan.stages[s].layers.begin(), plan.stages[s].layers.end());
  }
  std::sort(layers.begin(), layers.end());
  return layers;
}

int MicrobatchesPerStep(const Config& config) {
  const TrainConfig& t = config.train;
  return static_cast<int>(t.global_batch_size / (t.micro_batch_size * config.parallel.dp));
}

std::vector<LayerCost> MicrobatchCosts(const Config& config, const ModelSpec& spec,
                                       const std::vector<InstanceLoad>& loads) {
  std::vector<double> forward = EstimateForwardFlops(config.model, spec, config.data.seq_len, -1, -1, loads);
  for (size_t l = 0; l < forward.size(); ++l) {
    const int c = spec.layers[l].chain;
    const double runs = c == spec.llm_chain() ? 1 : LoadOf(loads, c).Instances();
    forward[l] *= static_cast<double>(config.train.micro_batch_size) * runs;
  }
  return FrozenAwareCosts(spec, forward);
}

std::vector<LayerCost> ProfiledCosts(const Config& config, const ModelSpec& spec, std::vector<double> seconds,
                                     const std::vector<InstanceLoad>& loads) {
  CS_CHECK(seconds.size() == spec.layers.size(), "one profiled time per layer");
  const std::vector<LayerCost> nominal = MicrobatchCosts(config, spec), data = MicrobatchCosts(config, spec, loads);
  for (size_t l = 0; l < seconds.size(); ++l) {
    if (nominal[l].forward > 0) seconds[l] *= data[l].forward / nominal[l].forward;
  }
  return FrozenAwareCosts(spec, seconds);
}

bool SplitOverTp(const ModelConfig& model, const ModelSpec& spec, int layer) {
  const int c = spec.layers[layer].chain;
  if (c == spec.llm_chain()) return true;
  // A sharded tower splits its blocks and projector; its embedding and final norm run whole.
  const ChainSpec& chain = spec.chains[c];
  return model.encoders[c].tp && layer != chain.begin && layer != chain.end - 2;
}

std::vector<LayerCost> PerRank(const ModelConfig& model, const ModelSpec& spec, std::vector<LayerCost> costs,
                               int64_t tp, int64_t cp) {
  for (int l = 0; l < static_cast<int>(costs.size()); ++l) {
    const double share = (SplitOverTp(model, spec, l) ? static_cast<double>(tp) : 1.0) *
                         (spec.layers[l].chain == spec.llm_chain() ? static_cast<double>(cp) : 1.0);
    costs[l].forward /= share;
    costs[l].backward /= share;
  }
  return costs;
}

PipelinePlan PlanFromConfig(const Config& config, const ModelSpec& spec, const std::vector<LayerCost>& costs) {
  const int pp = static_cast<int>(config.parallel.pp);
  const PlanMode mode = pp == 1 ? PlanMode::kColocated : config.parallel.pipeline;
  const ParallelConfig& p = config.parallel;
  PipelinePlan plan = PlanPipeline(spec, PerRank(config.model, spec, costs, p.tp, p.cp), pp,
                                   MicrobatchesPerStep(config), mode, 0.0, static_cast<int>(p.virtual_stages));
  if (!config.parallel.schedule_file.empty()) {
    // The placement was chosen under 1F1B; the file replaces the order the stages run it in.
    plan.schedule = LoadScheduleFile(config.parallel.schedule_file, plan.graph, MicrobatchesPerStep(config));
    plan.timeline = SimulatePlan(plan, 0.0);
  }
  return plan;
}

std::vector<double> RankMemoryBytes(const PipelinePlan& plan, const ModelSpec& spec,
                                    const std::vector<LayerMemory>& memory) {
  // What one microbatch's forward leaves for its backward, per stage (none without a backward), and the most its
  // backward allocates on top at once (one layer's backward runs at a time).
  std::vector<double> activations(plan.stages.size(), 0.0), working(plan.stages.size(), 0.0);
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    if (!plan.graph.has_backward[s]) continue;
    for (int l : plan.stages[s].layers) {
      activations[s] += memory[l].activation_bytes;
      working[s] = std::max(working[s], memory[l].backward_bytes);
    }
  }
  std::vector<double> bytes;
  for (int r = 0; r < plan.graph.num_ranks(); ++r) {
    double weights = 0, live = 0, peak = 0;
    for (int l : LayersOfRank(plan, r)) weights += memory[l].parameters * (spec.layers[l].trainable ? 16 : 4);
    for (const Action& a : plan.schedule[r]) {
      if (a.type == ActionType::kForward) peak = std::max(peak, live += activations[a.stage]);
      if (a.type == ActionType::kBackward) {
        peak = std::max(peak, live + working[a.stage]);
        live -= activations[a.stage];
      }
    }
    bytes.push_back(weights + peak);
  }
  return bytes;
}

std::string DescribeStages(const PipelinePlan& plan, const ModelSpec& spec) {
  std::string out;
  for (size_t c = 0; c < plan.encoder_stages.size(); ++c) {
    out += spec.chains[c].name + ":" + std::to_string(plan.encoder_stages[c]) + " ";
  }
  const bool shared = plan.encoder_stages.empty() && spec.chains.size() > 1;
  out += (shared ? "encoders+llm:" : "llm:") + std::to_string(plan.llm_stages);
  if (plan.virtual_stages > 1) out += " on " + std::to_string(plan.llm_stages / plan.virtual_stages) + " ranks";
  return out;
}

}  // namespace cornstarch
