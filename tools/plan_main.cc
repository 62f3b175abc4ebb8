// cornstarch-plan: the pipeline plan of a config without training and without MPI. For each placement (frozen-aware,
// uniform layer counts, colocated encoders, frozen-unaware) prints the stages with their layers and frozen-aware costs,
// the ranks running them with their estimated peak memory, the simulated step and its bubble (1F1B, or interleaved with
// parallel.schedule: interleaved), and writes the frozen-aware timeline as Chrome-trace JSON. Costs come from the FLOP
// estimate at an assumed rate, for what the data's first sequences hold (read here), or with --profile from timing
// every layer here on one config-sized instance per encoder, scaled to what the data holds by the FLOP estimate (as the
// trainer does); memory is estimated for what the data holds. With --auto it searches whole layouts of --ranks ranks on
// the config's cluster (plan/layout_search.h), prints the best ten and why the others lost, and --emit writes the best
// one's YAML.
//   cornstarch-plan [--config FILE] [--set key=value ...] [--ranks N] [--trace FILE] [--gflops RATE] [--profile]
//   cornstarch-plan --auto --ranks N [--config FILE] [--set key=value ...] [--emit FILE]
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "cornstarch/data/dataset.h"
#include "cornstarch/plan/config.h"
#include "cornstarch/plan/layout_search.h"
#include "cornstarch/plan/planner.h"
#include "cornstarch/train/chrome_trace.h"
#include "cornstarch/train/plan_builder.h"
#include "cornstarch/train/profiler.h"
#include "cornstarch/base/check.h"
#include "cornstarch/device/torch_runtime.h"
#include "tools/command_line.h"

namespace {

using namespace cornstarch;

std::string LayerRange(const ModelSpec& spec, const StagePlan& s) {
  if (s.layers.empty()) return "-";
  const std::string first = spec.layers[s.layers.front()].name, last = spec.layers[s.layers.back()].name;
  return s.layers.size() == 1 ? first : first + " .. " + last + " (" + std::to_string(s.layers.size()) + ")";
}

// `ms`: milliseconds per cost unit.
void Print(const ModelSpec& spec, const PipelinePlan& plan, double ms, const std::vector<LayerMemory>& memory) {
  const std::vector<double> bytes = RankMemoryBytes(plan, spec, memory);
  std::printf("\n== %s (%s): step %.2f ms, bubble %.1f%%, busiest rank %.2f ms\n", NameOf(plan.mode),
              DescribeStages(plan, spec).c_str(), plan.timeline.makespan * ms, 100 * plan.timeline.bubble_fraction,
              plan.bottleneck * ms);
  std::printf("%5s %5s  %-58s %10s %10s %5s %14s\n", "stage", "rank", "layers", "fwd ms", "bwd ms", "bwd?",
              "rank mem MiB");
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    const StagePlan& st = plan.stages[s];
    const int r = plan.graph.rank[s];
    std::printf("%5zu %5d  %-58s %10.3f %10.3f %5s %14.1f\n", s, r, LayerRange(spec, st).c_str(), st.forward * ms,
                st.backward * ms, plan.graph.has_backward[s] ? "yes" : "no", bytes[r] / (1 << 20));
  }
}

void WriteTrace(const PipelinePlan& plan, double ms, const std::string& path) {
  const double us = 1e3 * ms;
  ChromeTrace trace;
  for (int r = 0; r < static_cast<int>(plan.timeline.ranks.size()); ++r) {
    trace.NameThread(0, r, "pp rank " + std::to_string(r));
    for (const Timeline::Span& span : plan.timeline.ranks[r]) {
      trace.Span(span.action.ToString(), "", 0, r, span.start * us, (span.end - span.start) * us);
    }
  }
  std::ofstream out(path);
  if (!out) throw Error(path + ": cannot write the trace");
  out << trace.Json();
}

// The best ten layouts with their predictions, then how many lost and why; the best one's YAML into `emit`.
void PrintAuto(const Config& config, int ranks, const std::vector<InstanceLoad>& loads, const std::string& emit) {
  const std::vector<LayoutCost> all = SearchLayouts(config, ranks, loads);
  const ClusterConfig& k = config.cluster;
  std::printf("cornstarch-plan --auto: %d ranks, %lld per node, %.0f TFLOP/s x %.2f, %.0f GiB, %.0f / %.0f GB/s "
              "intra / inter node; %zu layouts\n\n", ranks, static_cast<long long>(k.gpus_per_node), k.tflops,
              k.efficiency, k.memory_gib, k.intra_node_gbps, k.inter_node_gbps, all.size());
  std::printf("%4s  %-36s %10s %12s %7s %8s %10s %9s\n", "#", "layout", "step s", "tokens/s", "MFU", "bubble",
              "mem GiB", "vs best");
  int shown = 0, candidates = 0;
  std::map<std::string, int> reasons;  // the rejected, by the field or reason that ruled them out
  for (const LayoutCost& c : all) {
    if (!c.rejected.empty()) {
      reasons[c.rejected.substr(0, c.rejected.find(':'))] += 1;
      continue;
    }
    ++candidates;
    if (shown == 10) continue;
    std::printf("%4d  %-36s %10.4f %12.0f %6.1f%% %7.1f%% %10.2f %8.2fx\n", ++shown, Describe(c.layout).c_str(),
                c.step_seconds, c.tokens_per_second, 100 * c.mfu, 100 * c.bubble, c.memory_bytes / (1 << 30),
                c.step_seconds / all.front().step_seconds);
  }
  if (shown == 0) throw Error("no layout of " + std::to_string(ranks) + " ranks can run; reasons: " +
                              (reasons.empty() ? std::string("none") : reasons.begin()->first));
  if (candidates > shown) {
    std::printf("\n%d other candidates are slower, the slowest by %.2fx\n", candidates - shown,
                all[static_cast<size_t>(candidates - 1)].step_seconds / all.front().step_seconds);
  }
  for (const auto& [reason, n] : reasons) std::printf("%6d rejected: %s\n", n, reason.c_str());
  if (!emit.empty()) {
    std::ofstream out(emit);
    out << "# cornstarch-plan --auto --ranks " << ranks << ": " << Describe(all.front().layout) << ", predicted "
        << all.front().step_seconds << " s per step\n"
        << LayoutYaml(config, all.front().layout);
    if (!out.flush()) throw Error(emit + ": cannot write");
    std::printf("\nwrote the best layout to %s\n", emit.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::string config_path, trace, emit;
    std::vector<std::string> overrides;
    int ranks = 0;
    double gflops = 100;
    bool profile = false, automatic = false;
    const char* usage =
        "usage: cornstarch-plan [--config FILE] [--set key=value ...] [--ranks N] [--trace FILE] [--gflops RATE] "
        "[--profile]\n  --ranks: pipeline ranks to plan for (default: parallel.pp, at least one per chain)\n"
        "  --gflops: assumed per-rank rate to turn FLOPs into time (default 100)\n"
        "  --profile: time every layer's forward on this machine instead (one process, train.num_threads threads)\n"
        "  --auto: search whole layouts of --ranks ranks on the config's cluster: section;\n"
        "  --emit FILE: write the best one's YAML\n";
    tools::ParseCommandLine(
        argc, argv, usage,
        {{"--config", true, [&](const std::string& v) { config_path = v; }},
         {"--set", true, [&](const std::string& v) { overrides.push_back(v); }},
         {"--ranks", true, [&](const std::string& v) { ranks = static_cast<int>(tools::ParseInteger("--ranks", v)); }},
         {"--trace", true, [&](const std::string& v) { trace = v; }},
         {"--gflops", true, [&](const std::string& v) { gflops = tools::ParseNumber("--gflops", v); }},
         {"--profile", false, [&](const std::string&) { profile = true; }},
         {"--auto", false, [&](const std::string&) { automatic = true; }},
         {"--emit", true, [&](const std::string& v) { emit = v; }}});
    const Config config = tools::LoadToolConfig(config_path, overrides);
    if (automatic && ranks < 1) throw Error("--auto needs --ranks N, the ranks of the job");
    // The encoders are costed on what the data holds, as the trainer does: its first sequences are read here.
    const std::vector<InstanceLoad> loads =
        FirstStepLoads(config, *MakeDataset(config, static_cast<uint64_t>(config.train.seed)));
    std::printf("cornstarch-plan: the data holds %s\n", DescribeLoads(config.model, loads).c_str());
    if (automatic) {
      PrintAuto(config, ranks, loads, emit);
      return 0;
    }
    if (!emit.empty()) throw Error("--emit writes what --auto chose; give --auto too");
    const ModelSpec spec = BuildModelSpec(config.model);
    if (ranks == 0) ranks = std::max<int>(static_cast<int>(config.parallel.pp), static_cast<int>(spec.chains.size()));
    const int microbatches = MicrobatchesPerStep(config);
    std::vector<LayerCost> costs = MicrobatchCosts(config, spec, loads);
    double ms = 1e3 / (gflops * 1e9);  // FLOPs -> ms at the assumed rate
    if (profile) {
      ConfigureTorchRuntime(config.train.num_threads, 1);
      costs = ProfiledCosts(config, spec, ProfileForwardSeconds(config), loads);
      ms = 1e3;
    }
    costs = PerRank(config.model, spec, costs, config.parallel.tp, config.parallel.cp);
    const std::string source =
        profile ? "profiled on this machine, scaled to what the data holds"
                : "from a FLOP estimate at " + std::to_string(std::lround(gflops)) + " GFLOP/s per rank";
    std::printf("cornstarch-plan: %d pipeline ranks, %d microbatches of %lld sequences, costs %s%s\n", ranks,
                microbatches, static_cast<long long>(config.train.micro_batch_size), source.c_str(),
                config.parallel.tp * config.parallel.cp > 1
                    ? (", per rank of tp=" + std::to_string(config.parallel.tp) + " x cp=" +
                       std::to_string(config.parallel.cp)).c_str()
                    : "");
    const std::vector<LayerMemory> memory =
        EstimateLayerMemory(config.model, spec, config.data.seq_len / config.parallel.cp, config.train.micro_batch_size,
                            config.parallel.tp, config.parallel.sequence_parallel, EffectivePrecision(config.train), -1,
                            loads, config.parallel.cp);
    PipelinePlan aware;
    for (PlanMode mode : {PlanMode::kFrozenAware, PlanMode::kUniform, PlanMode::kColocated, PlanMode::kFrozenUnaware}) {
      try {
        const PipelinePlan plan = PlanPipeline(spec, costs, ranks, microbatches, mode, 0.0,
                                               static_cast<int>(config.parallel.virtual_stages));
        Print(spec, plan, ms, memory);
        if (mode == PlanMode::kFrozenAware) aware = plan;
      } catch (const Error& e) {
        std::printf("\n== %s: %s\n", NameOf(mode), e.what());
      }
    }
    if (!trace.empty()) {
      WriteTrace(aware, ms, trace);
      std::printf("\nwrote the frozen-aware timeline to %s (chrome://tracing or Perfetto)\n", trace.c_str());
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
