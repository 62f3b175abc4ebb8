// cornstarch-plan: the pipeline plan of a config without training and without MPI. For each placement
// (frozen-aware, uniform layer counts, colocated encoders) prints the stages with their layers and frozen-aware
// costs and estimated peak memory, the simulated 1F1B step and its bubble, and writes the frozen-aware timeline as Chrome-trace JSON.
// Costs come from the FLOP estimate at an assumed rate, or with --profile from timing every layer here.
//   cornstarch-plan [--config FILE] [--set key=value ...] [--ranks N] [--trace FILE] [--gflops RATE] [--profile]
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cornstarch/config/config.h"
#include "cornstarch/pipeline/planner.h"
#include "cornstarch/pipeline/profiler.h"
#include "cornstarch/util/check.h"
#include "cornstarch/util/torch_runtime.h"

extern const char kEmbeddedConfig[];

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
  std::printf("\n== %s (%s): step %.2f ms, bubble %.1f%%, bottleneck stage %.2f ms\n", PlanModeName(plan.mode),
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
  nlohmann::json events = nlohmann::json::array();
  for (size_t s = 0; s < plan.timeline.stages.size(); ++s) {
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", s},
                      {"args", {{"name", "stage " + std::to_string(s)}}}});
    for (const Timeline::Span& span : plan.timeline.stages[s]) {
      events.push_back({{"name", span.action.ToString()}, {"ph", "X"}, {"pid", 0}, {"tid", s},
                        {"ts", span.start * us}, {"dur", (span.end - span.start) * us}});
    }
  }
  std::ofstream out(path);
  if (!out) throw Error(path + ": cannot write the trace");
  out << nlohmann::json{{"traceEvents", events}}.dump() << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::string config_path, trace;
    std::vector<std::string> overrides;
    int ranks = 0;
    double gflops = 100;
    bool profile = false;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= argc) throw Error(a + ": expected a value");
        return argv[++i];
      };
      if (a == "--config") config_path = value();
      else if (a == "--set") overrides.push_back(value());
      else if (a == "--ranks") ranks = std::stoi(value());
      else if (a == "--trace") trace = value();
      else if (a == "--gflops") gflops = std::stod(value());
      else if (a == "--profile") profile = true;
      else if (a == "--help") {
        std::cout << "usage: cornstarch-plan [--config FILE] [--set key=value ...] [--ranks N] [--trace FILE] "
                     "[--gflops RATE] [--profile]\n  --ranks: pipeline stages to plan for (default: parallel.pp, at least one "
                     "per chain)\n  --gflops: assumed per-rank rate to turn FLOPs into time (default 100)\n"
                     "  --profile: time every layer's forward on this machine instead (one process, "
                     "train.num_threads threads)\n";
        return 0;
      } else {
        throw Error(a + ": unknown argument (see --help)");
      }
    }
    const Config config = config_path.empty() ? ParseConfig(kEmbeddedConfig, "<embedded configs/tiny.yaml>", overrides)
                                              : LoadConfig(config_path, overrides);
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
    const std::string source = profile ? "profiled on this machine"
                                       : "from a FLOP estimate at " + std::to_string(std::lround(gflops)) + " GFLOP/s per rank";
    std::printf("cornstarch-plan: %d pipeline stages, %d microbatches of %lld sequences, costs %s\n", ranks,
                microbatches, static_cast<long long>(config.train.micro_batch_size), source.c_str());
    const std::vector<LayerMemory> memory =
        EstimateLayerMemory(config.model, spec, config.data.seq_len, config.train.micro_batch_size);
    PipelinePlan aware;
    for (PlanMode mode : {PlanMode::kFrozenAware, PlanMode::kUniform, PlanMode::kColocated}) {
      try {
        const PipelinePlan plan = PlanPipeline(spec, costs, ranks, microbatches, mode);
        Print(spec, plan, ms, memory);
        if (mode == PlanMode::kFrozenAware) aware = plan;
      } catch (const Error& e) {
        std::printf("\n== %s: %s\n", PlanModeName(mode), e.what());
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
