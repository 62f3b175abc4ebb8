// The whole parallel layout chosen by a cost model of one training step: tp x pp x cp x dp, the micro-batch size,
// activation recomputation, sequence parallelism, whether the towers split over tp and the pipeline schedule (1F1B
// or interleaved over 2 virtual stages), for a cluster described in the config's `cluster:` section. One step of a
// layout is predicted as
//   the pipeline schedule simulated (plan/schedule.h) on per-rank layer times: the frozen-aware FLOPs
//     (plan/cost_model.h, the encoders' for the instances the data holds) over cp and tp at cluster.tflops x
//     efficiency, plus each split layer's tp collectives (two forward, two backward, ring cost), each LLM block's
//     cp K/V all-gather (and its reduce-scatter backward), and a pp message per stage boundary and microbatch;
//   plus the part of the gradient all-reduce over dp x cp that the last backward does not hide.
// Where the ranks of a one-node CPU job share fewer cores (cluster.cores_per_node), a rank idle in the bubble lends
// its core: the pipeline takes its ranks' mean compute time, or its simulated makespan at a whole core's rate if
// that is longer.
// Memory per rank is the fullest rank's (RankMemoryBytes at the layout's tp, cp and micro-batch size, the
// sharded optimizer's moments divided over dp). Groups are placed as the rank mesh places them (tp innermost, pp
// outermost): a group inside a node uses the intra-node bandwidth, one that spans nodes the inter-node one.
// Pure: a config and the data's loads come in, predictions come out.
#pragma once

#include <string>
#include <vector>

#include "cornstarch/plan/config.h"
#include "cornstarch/plan/cost_model.h"

namespace cornstarch {

struct Layout {
  int tp = 1, pp = 1, cp = 1, dp = 1;
  int64_t micro_batch_size = 1;
  bool recompute = false;        // model.activation_checkpointing
  bool sequence_parallel = false;
  bool encoders_tp = true;       // every tower's model.encoders.<name>.tp
  int virtual_stages = 1;        // > 1: parallel.schedule interleaved

  int ranks() const { return tp * pp * cp * dp; }
};

// "tp2 pp2 cp1 dp2 mb2 sp recompute enc-whole"
std::string Describe(const Layout& layout);

struct LayoutCost {
  Layout layout;
  double step_seconds = 0;       // predicted
  double pipeline_seconds = 0;   // the simulated pipeline with its communication (sharing cores: see above)
  double dp_exposed_seconds = 0; // the gradient all-reduce's share that backward does not hide
  double bubble = 0;             // idle share of the pipeline
  double memory_bytes = 0;       // per rank, the fullest rank's
  double tokens_per_second = 0;
  double mfu = 0;                // model FLOPs per second over the ranks' peak
  std::string rejected;          // why it cannot run (invalid, spans nodes, out of memory); empty: a candidate
};

// `base` with the layout's parallel degrees, micro-batch size, recomputation and tower splits.
Config WithLayout(const Config& base, const Layout& layout);

// One step of `layout` on base.cluster, for data holding `loads` per encoder (plan/cost_model.h; empty: one
// config-sized instance per sample).
LayoutCost PredictLayout(const Config& base, const Layout& layout, const std::vector<InstanceLoad>& loads = {});

// Every layout of `ranks` ranks (tp within a node; micro-batch sizes that divide the per-replica batch;
// recomputation on and off; sequence parallelism whenever tp > 1; towers split or whole; 1F1B, and interleaved
// over 2 virtual stages when pp > 1), the candidates by
// predicted step time, then the rejected ones.
std::vector<LayoutCost> SearchLayouts(const Config& base, int ranks, const std::vector<InstanceLoad>& loads = {});

// The YAML lines that select `layout` (parallel, train.micro_batch_size, recomputation, tower splits).
std::string LayoutYaml(const Config& base, const Layout& layout);

}  // namespace cornstarch
