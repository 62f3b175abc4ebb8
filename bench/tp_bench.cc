// Tensor parallelism on CPU ranks, side by side with data parallelism over the same ranks and the same global batch.
// From the repository root (it reads configs/tiny.yaml):
//   bazel build -c opt //bench:tp_bench && mpirun -np 2 bazel-bin/bench/tp_bench [--steps N] [--rounds R]
//
// One job trains an LLM of ~30M parameters (frozen encoders) as dp = world (tp = 1), as tp = world and as tp = world
// with sequence parallelism, the trainers built once and run in turn, R rounds of N steps. Per layout: the median
// step time (the slowest rank's), the seconds per step the tp collectives took (model/tensor_parallel.h:
// TpCommSeconds) and their share of the step, per rank the parameter and AdamW-state bytes held next to the
// planner's estimate of them, and the planner's estimate of the activations one microbatch keeps for backward
// (plan/cost_model.h: EstimateLayerMemory; an estimate only, CPU allocations are not counted here).
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench/timing.h"
#include "cornstarch/base/logging.h"
#include "cornstarch/dist/launch_env.h"
#include "cornstarch/dist/mpi_communicator.h"
#include "cornstarch/dist/runtime.h"
#include "cornstarch/model/multimodal_model.h"
#include "cornstarch/model/tensor_parallel.h"
#include "cornstarch/plan/config.h"
#include "cornstarch/plan/cost_model.h"
#include "cornstarch/train/adamw.h"
#include "cornstarch/train/trainer.h"

using namespace cornstarch;
using cornstarch::bench::Median;

namespace {

struct Layout {
  std::string name;
  std::vector<std::string> parallel;  // its parallel.* overrides
  std::unique_ptr<DistRuntime> runtime;
  std::unique_ptr<Trainer> trainer;
  std::vector<double> step, comm;
  double held_mib = 0, estimate_mib = 0, activation_mib = 0;
};

double MaxOver(Communicator& world, double value) {
  torch::Tensor t = torch::full({1}, value, torch::kDouble);
  world.AllReduce(t, ReduceOp::kMax);
  return t.item<double>();
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = bench::IntFlag(argc, argv, "--steps", 3), rounds = bench::IntFlag(argc, argv, "--rounds", 3);
  InitMpi(&argc, &argv);
  const LaunchEnv env = DetectLaunchEnv();
  InitLogging(env.rank, "warn");
  return RunOrAbort([&] {
    const std::vector<std::string> base = {"model.llm.vocab_size=8192",
                                           "model.llm.hidden_size=512",
                                           "model.llm.num_layers=6",
                                           "model.llm.num_heads=8",
                                           "model.llm.num_kv_heads=4",
                                           "model.llm.intermediate_size=1408",
                                           "model.encoders.vision.frozen=true",
                                           "model.encoders.audio.frozen=true",
                                           "model.encoders.audio.projector.frozen=true",
                                           "model.encoders.vision.projector.frozen=true",
                                           "data.seq_len=256",
                                           "train.micro_batch_size=2",
                                           "train.global_batch_size=" + std::to_string(2 * env.world_size),
                                           "train.num_threads=1",
                                           "train.steps=100000",
                                           "logging.metrics_path=",
                                           "logging.level=warn",
                                           "logging.peak_tflops=1"};
    const std::string n = std::to_string(env.world_size);
    std::vector<Layout> layouts(3);
    layouts[0].name = "dp=" + n + " (tp=1)";
    layouts[0].parallel = {"parallel.dp=" + n};
    layouts[1].name = "tp=" + n;
    layouts[1].parallel = {"parallel.tp=" + n};
    layouts[2].name = "tp=" + n + " +sp";
    layouts[2].parallel = {"parallel.tp=" + n, "parallel.sequence_parallel=true"};
    const std::string tiny = "configs/tiny.yaml";
    for (Layout& l : layouts) {
      std::vector<std::string> o = base;
      o.insert(o.end(), l.parallel.begin(), l.parallel.end());
      const Config config = LoadConfig(tiny, o);
      l.runtime = std::make_unique<DistRuntime>(config.parallel, env, nullptr, nullptr);
      l.trainer = std::make_unique<Trainer>(config, *l.runtime);
      l.trainer->Step();  // warm-up: allocations, first-touch
      double bytes = 0;
      for (const auto& [name, p] : l.trainer->model().NamedParameters()) bytes += 4.0 * p.numel();
      bytes += static_cast<double>(l.trainer->optimizer().state_bytes());
      l.held_mib = MaxOver(l.runtime->world(), bytes) / (1 << 20);
      const ModelSpec& spec = l.trainer->model().spec();
      double estimate = 0, activations = 0;
      const auto memory = EstimateLayerMemory(config.model, spec, config.data.seq_len, config.train.micro_batch_size,
                                              config.parallel.tp, config.parallel.sequence_parallel);
      for (size_t i = 0; i < memory.size(); ++i) {
        estimate += 4.0 * memory[i].parameters * (spec.layers[i].trainable ? 3 : 1);  // weights, AdamW's 2 moments
        activations += memory[i].activation_bytes;
      }
      l.estimate_mib = estimate / (1 << 20);
      l.activation_mib = activations / (1 << 20);
    }
    for (int r = 0; r < rounds; ++r) {
      for (Layout& l : layouts) {
        for (int s = 0; s < steps; ++s) {
          const double before = TpCommSeconds();
          const StepMetrics metrics = l.trainer->Step();
          l.step.push_back(MaxOver(l.runtime->world(), metrics.step_seconds));
          l.comm.push_back(MaxOver(l.runtime->world(), TpCommSeconds() - before));
        }
      }
    }
    if (env.rank != 0) return 0;
    std::printf("%d ranks, %d rounds x %d steps per layout, layouts alternating; global batch %d x 256 tokens\n",
                env.world_size, rounds, steps, 2 * env.world_size);
    std::printf("%-14s %10s %10s %12s %10s %18s %17s %17s\n", "layout", "step s", "x dp", "tp comm s", "comm %",
                "weights+state MiB", "planner est. MiB", "est. act. MiB/mb");
    const double dp_step = Median(layouts[0].step);
    for (const Layout& l : layouts) {
      std::printf("%-14s %10.3f %10.3f %12.3f %9.1f%% %18.1f %17.1f %17.1f\n", l.name.c_str(), Median(l.step),
                  Median(l.step) / dp_step, Median(l.comm), 100 * Median(l.comm) / Median(l.step), l.held_mib,
                  l.estimate_mib, l.activation_mib);
    }
    return 0;
  });
}
