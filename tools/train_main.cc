// cornstarch-train: builds the MLLM of a config and trains it.
//   cornstarch-train [--config FILE] [--set key.path=value ...] [--resume] [--print-config] [--help] [--version]

#include <torch/version.h>

#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "cornstarch/plan/config.h"
#include "cornstarch/data/dataset.h"
#include "cornstarch/dist/launch_env.h"
#include "cornstarch/dist/machine_probe.h"
#include "cornstarch/dist/runtime.h"
#include "cornstarch/model/multimodal_model.h"
#include "cornstarch/plan/layout_search.h"
#include "cornstarch/plan/planner.h"
#include "cornstarch/train/plan_builder.h"
#include "cornstarch/train/stop_signal.h"
#include "cornstarch/train/trainer.h"
#include "cornstarch/base/check.h"
#include "cornstarch/base/logging.h"
#include "cornstarch/device/torch_runtime.h"
#include "cornstarch/base/version.h"
#include "tools/command_line.h"


namespace {

constexpr const char* kUsage = R"(usage: cornstarch-train [--config FILE] [--set key.path=value ...] [--resume] [--print-config]

Trains the multimodal LLM described by a YAML config. Without --config it runs the embedded default
(configs/tiny.yaml: a tiny vision + audio MLLM on synthetic data, one CPU process).

  --config FILE          YAML run configuration
  --set key.path=value   override one field, e.g. --set train.steps=50 (repeatable)
  --resume               continue from the newest complete checkpoint in checkpoint.dir
  --print-config         print the resolved configuration (every field) and exit
  --config-reference     print the reference of every config field (docs/configuration.md) and exit
  --version              print the version and exit
  --help                 this text
)";

struct Args {
  std::string config_path;
  std::vector<std::string> overrides;
  bool print_config = false;
};

Args ParseArgs(int argc, char** argv) {
  Args args;
  auto exit_with = [](const std::string& text) {
    std::cout << text;
    std::exit(0);
  };
  cornstarch::tools::ParseCommandLine(
      argc, argv, kUsage,
      {{"--config", true, [&](const std::string& v) { args.config_path = v; }},
       {"--set", true, [&](const std::string& v) { args.overrides.push_back(v); }},
       {"--resume", false, [&](const std::string&) { args.overrides.push_back("checkpoint.resume=latest"); }},
       {"--print-config", false, [&](const std::string&) { args.print_config = true; }},
       {"--config-reference", false, [&](const std::string&) { exit_with(cornstarch::ConfigReference()); }},
       {"--version", false, [&](const std::string&) {
          exit_with(std::string("cornstarch-train ") + CORNSTARCH_VERSION + " (LibTorch " + TORCH_VERSION + ")\n");
        }}});
  return args;
}

// parallel.auto: the layout the cost model ranks first for this job's ranks (plan/layout_search.h), for what the
// data's first sequences hold. Every rank reads the same ones and derives the same layout without talking to the
// others. On CPU (with cluster.measure) the ranks first measure this machine together, since the cluster:
// section's defaults describe GPUs.
cornstarch::Config AutoLayout(cornstarch::Config config, const cornstarch::LaunchEnv& env, int* argc, char*** argv) {
  const int ranks = env.world_size;
  const bool log = env.rank == 0;
  if (config.train.device == cornstarch::DeviceType::kCpu && config.cluster.measure) {
    cornstarch::ConfigureTorchRuntime(config.train.num_threads, env.local_world_size);  // as training will run
    cornstarch::ParallelConfig world;
    world.dp = ranks;
    world.timeout_seconds = config.parallel.timeout_seconds;
    cornstarch::DistRuntime probe(world, env, argc, argv);
    config.cluster = cornstarch::MeasureCpuCluster(probe.world(), env.local_world_size, config.cluster);
    const cornstarch::ClusterConfig& k = config.cluster;
    if (log) {
      const std::string network = ranks > 1 ? fmt::format("all-reduce {:.2f} GB/s, latency {:.0f} us, ",
                                                          k.intra_node_gbps, k.latency_us)
                                            : "";
      spdlog::info("parallel.auto: this machine measured: fp32 GEMM {:.1f} GFLOP/s per rank, {}{} ranks per node{}",
                   k.tflops * 1e3, network, k.gpus_per_node,
                   k.cores_per_node > 0 ? " sharing " + std::to_string(k.cores_per_node) + " cores" : "");
    }
  }
  const std::vector<cornstarch::InstanceLoad> loads = cornstarch::FirstStepLoads(
      config, *cornstarch::MakeDataset(config, static_cast<uint64_t>(config.train.seed)));
  const std::vector<cornstarch::LayoutCost> all = cornstarch::SearchLayouts(config, ranks, loads);
  const cornstarch::LayoutCost& best = all.front();
  if (!best.rejected.empty()) {
    throw cornstarch::Error("parallel.auto: no layout of " + std::to_string(ranks) + " ranks can run; the first " +
                            "rejected: " + cornstarch::Describe(best.layout) + ": " + best.rejected);
  }
  if (log) {
    spdlog::info("parallel.auto: the data holds {}", cornstarch::DescribeLoads(config.model, loads));
    spdlog::info("parallel.auto: {} of {} layouts for {} ranks, predicted {:.4f} s per step, {:.0f} tokens/s, "
                 "MFU {:.1f}%", cornstarch::Describe(best.layout), all.size(), ranks, best.step_seconds,
                 best.tokens_per_second, 100 * best.mfu);
    if (all.size() > 1 && all[1].rejected.empty()) {
      spdlog::info("parallel.auto: runner-up {}, predicted {:.2f}x slower", cornstarch::Describe(all[1].layout),
                   all[1].step_seconds / best.step_seconds);
    }
  }
  return cornstarch::WithLayout(config, best.layout);
}

}  // namespace

int main(int argc, char** argv) {
  cornstarch::tools::EnterUserDirectory();  // `bazel run` starts us in the runfiles tree
  cornstarch::LaunchEnv env;
  try {
    env = cornstarch::DetectLaunchEnv();
  } catch (const cornstarch::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  cornstarch::InitLogging(env.rank, "info");
  return cornstarch::RunOrAbort([&] {
    const Args args = ParseArgs(argc, argv);
    const std::string source = cornstarch::tools::ConfigSource(args.config_path);
    cornstarch::Config config = cornstarch::tools::LoadToolConfig(args.config_path, args.overrides);
    if (config.parallel.auto_layout) config = AutoLayout(config, env, &argc, &argv);
    if (args.print_config) {
      if (env.rank == 0) std::cout << cornstarch::ToYaml(config);
      return 0;
    }
    spdlog::set_level(spdlog::level::from_str(cornstarch::NameOf(config.logging.level)));
    cornstarch::DistRuntime runtime(config.parallel, env, &argc, &argv);
    cornstarch::InstallStopSignals();  // SIGTERM/SIGUSR1: finish the step, checkpoint, exit 0
    cornstarch::Trainer trainer(config, runtime);
    const cornstarch::PipelinePlan& plan = trainer.plan();
    const cornstarch::ModelSpec& spec = trainer.model().spec();
    if (env.rank == 0) {
      spdlog::info("cornstarch-train {}, config {}, {}, {} on {}; {}", CORNSTARCH_VERSION, source,
                   runtime.dims().Describe(), cornstarch::NameOf(cornstarch::EffectivePrecision(config.train)),
                   cornstarch::NameOf(config.train.device), cornstarch::DescribeTorchRuntime());
      if (plan.stages.size() > 1) {
        spdlog::info("pipeline: {} placement on {} costs, stages {}, {} microbatches, simulated bubble {:.1f}%",
                     cornstarch::NameOf(plan.mode),
                     config.parallel.pipeline_costs == cornstarch::CostSource::kProfile ? "profiled" : "FLOP-estimated",
                     cornstarch::DescribeStages(plan, spec), cornstarch::MicrobatchesPerStep(config),
                     100 * plan.timeline.bubble_fraction);
      }
    }
    const cornstarch::ParallelDims::Coord coord = runtime.coord();
    if (coord.dp == 0 && coord.cp == 0) {  // one line per pipeline rank
      int64_t total = 0, trainable = 0;
      for (const auto& [name, p] : trainer.model().NamedParameters()) {
        total += p.numel();
        if (p.requires_grad()) trainable += p.numel();
      }
      std::string stages;
      for (int s : plan.graph.StagesOf(coord.pp)) {
        const std::vector<int>& layers = plan.stages[s].layers;
        stages += fmt::format("{}stage {}: ", stages.empty() ? "" : "; ", s);
        stages += layers.size() == 1 ? spec.layers[layers.front()].name
                                     : fmt::format("{} layers {} .. {}", layers.size(), spec.layers[layers.front()].name,
                                                   spec.layers[layers.back()].name);
      }
      spdlog::info("pp rank {}/{}: {}; {} parameters ({} trainable)", coord.pp, plan.graph.num_ranks(), stages, total,
                   trainable);
    }
    trainer.Run();
    return 0;
  });
}
