// cornstarch-plan: the pipeline plan of a config without training and without MPI. For each placement
// (frozen-aware, uniform layer counts, colocated encoders) prints the stages with their layers and frozen-aware
// costs and estimated peak memory, the simulated 1F1B step and its bubble, and writes the frozen-aware timeline as Chrome-trace JSON.
// Costs come from the FLOP estimate at an assumed rate, or with --profile from timing every layer here.
//   cornstarch-plan [--config FILE] [--set key=value ...] [--ranks N] [--trace FILE] [--gflops RATE] [--profile]
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "cornstarch/plan/config.h"
#include "cornstarch/plan/planner.h"
#include "cornstarch/train/chrome_trace.h"
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
  const std::vector<double> bytes = StageMemoryBytes(plan, spec, memory);
  std::printf("\n== %s (%s): step %.2f ms, bubble %.1f%%, bottleneck stage %.2f ms\n", NameOf(plan.mode),
              DescribeStages(plan, spec).c_str(), plan.timeline.makespan * ms, 100 * plan.timeline.bubble_fraction,
              plan.bottleneck * ms);
  std::printf("%5s  %-58s %10s %10s %5s %10s\n", "stage", "layers", "fwd ms", "bwd ms", "bwd?", "mem MiB");
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    const StagePlan& st = plan.stages[s];
    std::printf("%5zu  %-58s %10.3f %10.3f %5s %10.1f\n", s, LayerRange(spec, st).c_str(), st.forward * ms,
                st.backward * ms, plan.graph.has_backward[s] ? "yes" : "no", bytes[s] / (1 << 20));
  }
}

void WriteTrace(const PipelinePlan& plan, double ms, const std::string& path) {
  const double us = 1e3 * ms;
  ChromeTrace trace;
  for (int s = 0; s < static_cast<int>(plan.timeline.stages.size()); ++s) {
    trace.NameThread(0, s, "stage " + std::to_string(s));
    for (const Timeline::Span& span : plan.timeline.stages[s]) {
      trace.Span(span.action.ToString(), "", 0, s, span.start * us, (span.end - span.start) * us);
    }
  }
  std::ofstream out(path);
  if (!out) throw Error(path + ": cannot write the trace");
  out << trace.Json();
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::string config_path, trace;
    std::vector<std::string> overrides;
    int ranks = 0;
    double gflops = 100;
    bool profile = false;
    const char* usage =
        "usage: cornstarch-plan [--config FILE] [--set key=value ...] [--ranks N] [--trace FILE] [--gflops RATE] "
        "[--profile]\n  --ranks: pipeline stages to plan for (default: parallel.pp, at least one per chain)\n"
        "  --gflops: assumed per-rank rate to turn FLOPs into time (default 100)\n"
        "  --profile: time every layer's forward on this machine instead (one process, train.num_threads threads)\n";
    tools::ParseCommandLine(
        argc, argv, usage,
        {{"--config", true, [&](const std::string& v) { config_path = v; }},
         {"--set", true, [&](const std::string& v) { overrides.push_back(v); }},
         {"--ranks", true, [&](const std::string& v) { ranks = static_cast<int>(tools::ParseInteger("--ranks", v)); }},
         {"--trace", true, [&](const std::string& v) { trace = v; }},
         {"--gflops", true, [&](const std::string& v) { gflops = tools::ParseNumber("--gflops", v); }},
         {"--profile", false, [&](const std::string&) { profile = true; }}});
    const Config config = tools::LoadToolConfig(config_path, overrides);
    const ModelSpec spec = BuildModelSpec(config.model);
    if (ranks == 0) ranks = std::max<int>(static_cast<int>(config.parallel.pp), static_cast<int>(spec.chains.size()));
    const int microbatches = MicrobatchesPerStep(config);
    std::vector<LayerCost> costs = MicrobatchCosts(config, spec);
    double ms = 1e3 / (gflops * 1e9);  // FLOPs -> ms at the assumed rate
    if (profile) {
      ConfigureTorchRuntime(config.train.num_threads, 1);
      costs = FrozenAwareCosts(spec, ProfileForwardSeconds(config));
      ms = 1e3;
    }
    costs = PerTpRank(config.model, spec, costs, config.parallel.tp);
    const std::string source = profile ? "profiled on this machine"
                                       : "from a FLOP estimate at " + std::to_string(std::lround(gflops)) + " GFLOP/s per rank";
    std::printf("cornstarch-plan: %d pipeline stages, %d microbatches of %lld sequences, costs %s%s\n", ranks,
                microbatches, static_cast<long long>(config.train.micro_batch_size), source.c_str(),
                config.parallel.tp > 1 ? (", per rank of tp=" + std::to_string(config.parallel.tp)).c_str() : "");
    const std::vector<LayerMemory> memory =
        EstimateLayerMemory(config.model, spec, config.data.seq_len, config.train.micro_batch_size, config.parallel.tp,
                            config.parallel.sequence_parallel);
    PipelinePlan aware;
    for (PlanMode mode : {PlanMode::kFrozenAware, PlanMode::kUniform, PlanMode::kColocated}) {
      try {
        const PipelinePlan plan = PlanPipeline(spec, costs, ranks, microbatches, mode);
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
