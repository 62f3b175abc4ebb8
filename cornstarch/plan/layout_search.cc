#include "cornstarch/plan/layout_search.h"

#include <algorithm>
#include <cmath>

#include "cornstarch/base/check.h"
#include "cornstarch/plan/cost_model.h"
#include "cornstarch/plan/encoder_kind.h"
#include "cornstarch/plan/model_spec.h"
#include "cornstarch/plan/planner.h"

namespace cornstarch {

namespace {

// Seconds of a ring all-reduce of `bytes` over n ranks (2 (n - 1) / n of the bytes cross each link); an
// all-gather or reduce-scatter moves half of that.
double AllReduceSeconds(double bytes, int n, double gbps, double latency) {
  return n <= 1 ? 0.0 : 2.0 * (n - 1) / n * bytes / (gbps * 1e9) + latency;
}

// Whether layer `l` has tp collectives worth pricing: every split layer but the LM head, whose loss reductions
// are a few floats per row.
bool TpCollectives(const Config& c, const ModelSpec& spec, int l) {
  return SplitOverTp(c.model, spec, l) && l != spec.chains[spec.llm_chain()].end - 1;
}

// Tokens and width of what layer `l`'s tp collectives carry for one microbatch (of an encoder, the instances
// `loads` says a sample holds).
double ActivationElements(const Config& c, const ModelSpec& spec, int l, int64_t llm_tokens,
                          const std::vector<InstanceLoad>& loads) {
  const LayerSpec& layer = spec.layers[l];
  const auto mb = static_cast<double>(c.train.micro_batch_size);
  if (layer.chain == spec.llm_chain()) return mb * static_cast<double>(llm_tokens * c.model.llm.hidden_size);
  const EncoderConfig& e = c.model.encoders[layer.chain];
  const InstanceLoad load = LoadOf(loads, layer.chain);
  const bool projector = l == spec.chains[layer.chain].end - 1;
  return mb * load.Instances() *
         (projector ? load.Tokens(e) * static_cast<double>(c.model.llm.hidden_size)
                    : load.Sequence(e) * static_cast<double>(e.hidden_size));
}

}  // namespace

std::string Describe(const Layout& l) {
  std::string out = "tp" + std::to_string(l.tp) + " pp" + std::to_string(l.pp) + " cp" + std::to_string(l.cp) +
                    " dp" + std::to_string(l.dp) + " mb" + std::to_string(l.micro_batch_size);
  if (l.sequence_parallel) out += " sp";
  if (l.recompute) out += " recompute";
  if (l.tp > 1 && !l.encoders_tp) out += " enc-whole";
  if (l.virtual_stages > 1) out += " v" + std::to_string(l.virtual_stages);
  return out;
}

Config WithLayout(const Config& base, const Layout& l) {
  Config c = base;
  c.parallel.tp = l.tp;
  c.parallel.pp = l.pp;
  c.parallel.cp = l.cp;
  c.parallel.dp = l.dp;
  c.parallel.sequence_parallel = l.sequence_parallel;
  c.parallel.virtual_stages = l.virtual_stages;
  c.parallel.schedule = l.virtual_stages > 1 ? ScheduleKind::kInterleaved : ScheduleKind::k1F1B;
  c.train.micro_batch_size = l.micro_batch_size;
  c.model.activation_checkpointing = l.recompute;
  for (EncoderConfig& e : c.model.encoders) e.tp = l.encoders_tp;
  return c;
}

LayoutCost PredictLayout(const Config& base, const Layout& layout, const std::vector<InstanceLoad>& loads) {
  LayoutCost out;
  out.layout = layout;
  const Config c = WithLayout(base, layout);
  const ClusterConfig& k = c.cluster;
  if (layout.tp > k.gpus_per_node) {
    out.rejected = "tp=" + std::to_string(layout.tp) + " spans nodes (cluster.gpus_per_node=" +
                   std::to_string(k.gpus_per_node) + ")";
    return out;
  }
  try {
    Validate(c);
  } catch (const Error& e) {
    out.rejected = e.what();
    return out;
  }
  const ModelSpec spec = BuildModelSpec(c.model);
  const double rate = k.tflops * 1e12 * k.efficiency, latency = k.latency_us * 1e-6;
  const double gpn = static_cast<double>(k.gpus_per_node);
  // A group whose members lie within `span` consecutive ranks of the mesh stays inside a node when that fits one.
  auto gbps = [&](int span) { return span <= gpn ? k.intra_node_gbps : k.inter_node_gbps; };
  const double elem = EffectivePrecision(c.train) == Precision::kBf16 ? 2.0 : 4.0;
  const int64_t llm_tokens = c.data.seq_len / layout.cp;  // per cp rank

  // Per-rank layer times: a microbatch's FLOPs at the sustained rate, split over tp and cp as the run's plan
  // splits them (PerRank).
  std::vector<LayerCost> costs = MicrobatchCosts(c, spec, loads);
  for (LayerCost& x : costs) {
    x.forward /= rate;
    x.backward /= rate;
  }
  costs = PerRank(c.model, spec, costs, layout.tp, layout.cp);
  const ChainSpec& llm = spec.chains[spec.llm_chain()];
  const double tp_gbps = gbps(layout.tp), cp_gbps = gbps(layout.tp * layout.cp);
  const double overhead = k.layer_overhead_us * 1e-6;
  for (int l = 0; l < static_cast<int>(spec.layers.size()); ++l) {
    const LayerSpec& ls = spec.layers[l];
    // Fixed per microbatch: every tp or cp rank runs all of a layer's ops, however small its shard, and a larger
    // micro-batch runs the same ops on more rows. This is why cp and tp gain less than their FLOPs suggest, and a
    // larger micro-batch more.
    costs[l].forward += overhead;
    if (costs[l].backward > 0) costs[l].backward += (ls.recompute ? 3 : 2) * overhead;
    if (layout.tp > 1 && TpCollectives(c, spec, l)) {
      // Two all-reduces (or, under sequence parallelism, a gather and a reduce-scatter: the same bytes) each way;
      // a recomputed layer repeats its forward ones in backward.
      const double bytes = ActivationElements(c, spec, l, llm_tokens, loads) * elem;
      const double t = AllReduceSeconds(bytes, layout.tp, tp_gbps, latency);
      costs[l].forward += 2 * t;
      if (costs[l].backward > 0) costs[l].backward += (ls.recompute ? 4 : 2) * t;
    }
    if (layout.cp > 1 && ls.chain == spec.llm_chain() && l != llm.begin && l != llm.end - 1) {
      // Each rank gathers the other ranks' K and V (its kv heads: 1/tp of them); backward reduce-scatters dK, dV.
      const LlmConfig& m = c.model.llm;
      const double kv = 2.0 * static_cast<double>(c.train.micro_batch_size * c.data.seq_len * m.num_kv_heads *
                                                  (m.hidden_size / m.num_heads)) / layout.tp * elem;
      const double t = (layout.cp - 1.0) / layout.cp * kv / (cp_gbps * 1e9) + latency;
      costs[l].forward += t;
      if (costs[l].backward > 0) costs[l].backward += (ls.recompute ? 2 : 1) * t;
    }
  }
  // A pp message: one microbatch's hidden state (its sequence piece under sequence parallelism), crossing nodes
  // once a stage's tp x cp x dp ranks fill a node.
  const double message = static_cast<double>(c.train.micro_batch_size * llm_tokens * c.model.llm.hidden_size) *
                         elem / (layout.sequence_parallel ? layout.tp : 1);
  const int per_stage = layout.tp * layout.cp * layout.dp;
  const double transfer = layout.pp > 1 ? message / (gbps(per_stage * 2) * 1e9) + latency : 0.0;
  const int microbatches = MicrobatchesPerStep(c);
  PipelinePlan plan;
  try {
    const PlanMode mode = layout.pp == 1 ? PlanMode::kColocated : c.parallel.pipeline;
    plan = PlanPipeline(spec, costs, layout.pp, microbatches, mode, transfer, layout.virtual_stages);
  } catch (const Error& e) {
    out.rejected = e.what();
    return out;
  }
  out.pipeline_seconds = plan.timeline.makespan;
  out.bubble = plan.timeline.bubble_fraction;
  const double sharing = k.cores_per_node > 0 ? layout.ranks() / static_cast<double>(k.cores_per_node) : 1.0;
  if (sharing > 1 && layout.ranks() <= gpn) {
    // A job of one node whose ranks share its cores: one waiting in the bubble leaves its share to those
    // computing, so the pipeline takes the node's work spread over its cores (the ranks' mean compute time at the
    // all-busy rate; the messages' time is left out, small beside it on one node), unless its critical path at a
    // whole core's rate takes longer. Across nodes a rank could lend only to its own node's: not modelled.
    out.pipeline_seconds = std::max(out.pipeline_seconds * (1 - out.bubble), out.pipeline_seconds / sharing);
  }

  // Gradients: summed over dp x cp once per step; overlapped, all but what outlasts the last microbatch's backward.
  const std::vector<LayerMemory> memory =
      EstimateLayerMemory(c.model, spec, llm_tokens, layout.micro_batch_size, layout.tp, layout.sequence_parallel,
                          EffectivePrecision(c.train), -1, loads, layout.cp);
  const std::vector<double> rank_bytes = RankMemoryBytes(plan, spec, memory);
  const int replicas = layout.dp * layout.cp;
  const double grad_elem = c.parallel.grad_reduce_dtype == FloatType::kBf16 ? 2.0 : 4.0;
  for (int r = 0; r < plan.graph.num_ranks(); ++r) {
    double trainable = 0, last_backward = 0;
    for (int l : LayersOfRank(plan, r)) trainable += spec.layers[l].trainable ? memory[l].parameters : 0;
    for (int s : plan.graph.StagesOf(r)) last_backward += plan.stages[s].backward;
    const double reduce = AllReduceSeconds(trainable * grad_elem, replicas, gbps(per_stage), latency);
    const double hidden = c.parallel.overlap_grad_sync ? last_backward : 0.0;
    out.dp_exposed_seconds = std::max(out.dp_exposed_seconds, std::max(0.0, reduce - hidden));
    // The sharded optimizer keeps 1/dp of the two moments (8 of RankMemoryBytes' 16 bytes per parameter).
    double bytes = rank_bytes[r];
    if (c.optimizer.shard && layout.dp > 1) bytes -= 8.0 * trainable * (1.0 - 1.0 / layout.dp);
    out.memory_bytes = std::max(out.memory_bytes, bytes);
  }
  out.step_seconds = out.pipeline_seconds + out.dp_exposed_seconds;
  const double samples = static_cast<double>(c.train.global_batch_size);
  out.tokens_per_second = samples * static_cast<double>(c.data.seq_len) / out.step_seconds;
  // Model FLOPs: the frozen-aware forward and backward of every sample, without recomputation's extra forward.
  Config plain = c;
  plain.model.activation_checkpointing = false;
  plain.train.micro_batch_size = 1;
  double flops = 0;
  for (const LayerCost& x : MicrobatchCosts(plain, BuildModelSpec(plain.model), loads)) flops += x.total();
  out.mfu = flops * samples / (out.step_seconds * layout.ranks() * k.tflops * 1e12);
  const double limit = k.memory_gib * (1ull << 30);
  if (out.memory_bytes > limit) {
    out.rejected = "out of memory: " + std::to_string(std::lround(out.memory_bytes / (1 << 20))) +
                   " MiB per rank > cluster.memory_gib=" + std::to_string(k.memory_gib);
  }
  return out;
}

std::vector<LayoutCost> SearchLayouts(const Config& base, int ranks, const std::vector<InstanceLoad>& loads) {
  CS_CHECK(ranks >= 1, "ranks ", ranks);
  std::vector<int> divisors;
  for (int d = 1; d <= ranks; ++d) {
    if (ranks % d == 0) divisors.push_back(d);
  }
  std::vector<LayoutCost> out;
  for (int tp : divisors) {
    for (int cp : divisors) {
      for (int pp : divisors) {
        if (ranks % (tp * cp * pp) != 0) continue;
        const int dp = ranks / (tp * cp * pp);
        const int64_t per_replica = base.train.global_batch_size / dp;
        for (int64_t mb = 1; mb <= per_replica; mb *= 2) {
          for (const bool recompute : {false, true}) {
            for (const bool encoders_tp : {true, false}) {
              if ((tp == 1 || base.model.encoders.empty()) && !encoders_tp) continue;  // the same layout
              for (const int v : {1, 2}) {
                if (v > 1 && pp == 1) continue;  // interleaving needs a pipeline
                out.push_back(
                    PredictLayout(base, Layout{tp, pp, cp, dp, mb, recompute, tp > 1, encoders_tp, v}, loads));
              }
            }
          }
        }
      }
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const LayoutCost& a, const LayoutCost& b) {
    if (a.rejected.empty() != b.rejected.empty()) return a.rejected.empty();
    return a.rejected.empty() && a.step_seconds < b.step_seconds;
  });
  return out;
}

std::string LayoutYaml(const Config& base, const Layout& l) {
  std::string out = "parallel:\n  tp: " + std::to_string(l.tp) + "\n  pp: " + std::to_string(l.pp) + "\n  cp: " +
                    std::to_string(l.cp) + "\n  dp: " + std::to_string(l.dp) + "\n  sequence_parallel: " +
                    (l.sequence_parallel ? "true" : "false") + "\n  schedule: " +
                    (l.virtual_stages > 1 ? "interleaved" : "1f1b") + "\n  virtual_stages: " +
                    std::to_string(l.virtual_stages) + "\ntrain:\n  micro_batch_size: " +
                    std::to_string(l.micro_batch_size) + "\nmodel:\n  activation_checkpointing: " +
                    (l.recompute ? "true" : "false") + "\n";
  if (!base.model.encoders.empty()) {
    out += "  encoders:\n";
    for (const EncoderConfig& e : base.model.encoders) {
      out += "    " + e.name + ":\n      tp: " + (l.encoders_tp ? "true" : "false") + "\n";
    }
  }
  return out;
}

}  // namespace cornstarch
