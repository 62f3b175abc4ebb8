// cornstarch-train: builds the MLLM of a config and trains it.
//   cornstarch-train [--config FILE] [--set key.path=value ...] [--resume] [--print-config] [--help] [--version]

#include <torch/version.h>

#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include <unistd.h>

#include "cornstarch/config/config.h"
#include "cornstarch/dist/launch_env.h"
#include "cornstarch/dist/runtime.h"
#include "cornstarch/model/multimodal_model.h"
#include "cornstarch/pipeline/planner.h"
#include "cornstarch/train/trainer.h"
#include "cornstarch/util/check.h"
#include "cornstarch/util/logging.h"
#include "cornstarch/util/torch_runtime.h"
#include "cornstarch/version.h"

extern const char kEmbeddedConfig[];

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
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const std::string& flag) -> std::string {
      if (a.size() > flag.size() && a.compare(0, flag.size() + 1, flag + "=") == 0) return a.substr(flag.size() + 1);
      if (i + 1 >= argc) throw cornstarch::Error(flag + ": expected a value");
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      std::cout << kUsage;
      std::exit(0);
    } else if (a == "--version") {
      std::cout << "cornstarch-train " << CORNSTARCH_VERSION << " (LibTorch " << TORCH_VERSION << ")\n";
      std::exit(0);
    } else if (a == "--config-reference") {
      std::cout << cornstarch::ConfigReference();
      std::exit(0);
    } else if (a == "--resume") {
      args.overrides.push_back("checkpoint.resume=latest");
    } else if (a == "--print-config") {
      args.print_config = true;
    } else if (a.rfind("--config", 0) == 0) {
      args.config_path = value("--config");
    } else if (a.rfind("--set", 0) == 0) {
      args.overrides.push_back(value("--set"));
    } else {
      throw cornstarch::Error(a + ": unknown argument (see --help)");
    }
  }
  return args;
}

}  // namespace

int main(int argc, char** argv) {
  // `bazel run` starts us in the runfiles tree; relative paths are the user's.
  if (const char* dir = std::getenv("BUILD_WORKING_DIRECTORY")) {
    if (chdir(dir) != 0) std::cerr << "warning: cannot enter " << dir << "\n";
  }
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
    const std::string source = args.config_path.empty() ? "<embedded configs/tiny.yaml>" : args.config_path;
    const cornstarch::Config config = args.config_path.empty()
                                          ? cornstarch::ParseConfig(kEmbeddedConfig, source, args.overrides)
                                          : cornstarch::LoadConfig(args.config_path, args.overrides);
    if (args.print_config) {
      if (env.rank == 0) std::cout << cornstarch::ToYaml(config);
      return 0;
    }
    spdlog::set_level(spdlog::level::from_str(config.logging.level));
    cornstarch::DistRuntime runtime(config.parallel, env, &argc, &argv);
    cornstarch::Trainer trainer(config, runtime);
    const cornstarch::PipelinePlan& plan = trainer.plan();
    const cornstarch::ModelSpec& spec = trainer.model().spec();
    if (env.rank == 0) {
      spdlog::info("cornstarch-train {}, config {}, {}; {}", CORNSTARCH_VERSION, source, runtime.dims().Describe(),
                   cornstarch::DescribeTorchRuntime());
      if (plan.stages.size() > 1) {
        spdlog::info("pipeline: {} placement on {} costs, stages {}, {} microbatches, simulated bubble {:.1f}%",
                     cornstarch::PlanModeName(plan.mode),
                     config.parallel.pipeline_costs == "profile" ? "profiled" : "FLOP-estimated",
                     cornstarch::DescribeStages(plan, spec), cornstarch::MicrobatchesPerStep(config),
                     100 * plan.timeline.bubble_fraction);
      }
    }
    const cornstarch::ParallelDims::Coord coord = runtime.coord();
    if (coord.dp == 0 && coord.cp == 0) {  // one line per pipeline stage
      int64_t total = 0, trainable = 0;
      for (const auto& [name, p] : trainer.model().NamedParameters()) {
        total += p.numel();
        if (p.requires_grad()) trainable += p.numel();
      }
      const std::vector<int>& layers = plan.stages[coord.pp].layers;
      spdlog::info("stage {}/{}: {} layers {} .. {}, {} parameters ({} trainable)", coord.pp, plan.stages.size(),
                   layers.size(), spec.layers[layers.front()].name, spec.layers[layers.back()].name, total,
                   trainable);
    }
    trainer.Run();
    return 0;
  });
}
