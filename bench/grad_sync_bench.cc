// Gradient synchronisation over dp, side by side: after backward vs overlapped with it, whole AdamW state vs
// sharded (ZeRO-1).
// From the repository root (it reads configs/tiny.yaml):
//   bazel build -c opt //bench:grad_sync_bench && mpirun -np 2 bazel-bin/bench/grad_sync_bench [--steps N] [--rounds R]
//
// One dp = world-size job trains an LLM with ~14M parameters (56 MB of fp32 gradients, 4 MiB buckets) in four
// trainers, one per mode, built once; each round runs N steps of every mode in turn, R rounds (a noisy machine's
// drift hits all modes). Per mode: the median step time, the median time the step waited for the gradient sums
// after backward (GradSync::Finish: what overlap hides), how many buckets started under backward, and the AdamW
// state per rank (the largest of the ranks). Ratios are to the post-hoc, unsharded mode measured in the same run.
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench/timing.h"
#include "cornstarch/base/check.h"
#include "cornstarch/base/logging.h"
#include "cornstarch/dist/launch_env.h"
#include "cornstarch/dist/mpi_communicator.h"
#include "cornstarch/dist/runtime.h"
#include "cornstarch/plan/config.h"
#include "cornstarch/train/adamw.h"
#include "cornstarch/train/grad_sync.h"
#include "cornstarch/train/trainer.h"

using namespace cornstarch;
using cornstarch::bench::Median;

namespace {

struct Mode {
  std::string name;
  std::vector<std::string> overrides;
  std::unique_ptr<Trainer> trainer;
  std::vector<double> step, wait;
  int overlapped = 0, buckets = 0;
};

}  // namespace

int main(int argc, char** argv) {
  const int steps = bench::IntFlag(argc, argv, "--steps", 3), rounds = bench::IntFlag(argc, argv, "--rounds", 3);
  InitMpi(&argc, &argv);
  const LaunchEnv env = DetectLaunchEnv();
  InitLogging(env.rank, "warn");
  return RunOrAbort([&] {
    const std::vector<std::string> base = {"model.llm.vocab_size=4096",
                                           "model.llm.hidden_size=384",
                                           "model.llm.num_layers=6",
                                           "model.llm.num_heads=6",
                                           "model.llm.num_kv_heads=2",
                                           "model.llm.intermediate_size=1536",
                                           "model.encoders.vision.frozen=true",
                                           "model.encoders.audio.frozen=true",
                                           "model.encoders.audio.projector.frozen=true",
                                           "model.encoders.vision.projector.frozen=true",
                                           "data.seq_len=128",
                                           "train.micro_batch_size=2",
                                           "train.global_batch_size=" + std::to_string(4 * env.world_size),
                                           "train.num_threads=1",
                                           "train.steps=100000",
                                           "logging.metrics_path=",
                                           "logging.level=warn",
                                           "logging.peak_tflops=1",
                                           "parallel.dp=" + std::to_string(env.world_size),
                                           "parallel.grad_bucket_mib=4"};
    std::vector<Mode> modes(4);
    modes[0] = {"after backward", {"parallel.overlap_grad_sync=false"}};
    modes[1] = {"overlapped", {"parallel.overlap_grad_sync=true"}};
    modes[2] = {"sharded, after backward", {"parallel.overlap_grad_sync=false", "optimizer.shard=true"}};
    modes[3] = {"sharded, overlapped", {"parallel.overlap_grad_sync=true", "optimizer.shard=true"}};
    const std::string tiny = "configs/tiny.yaml";
    const Config first = LoadConfig(tiny, base);
    DistRuntime runtime(first.parallel, env, nullptr, nullptr);
    for (Mode& m : modes) {
      std::vector<std::string> o = base;
      o.insert(o.end(), m.overrides.begin(), m.overrides.end());
      m.trainer = std::make_unique<Trainer>(LoadConfig(tiny, o), runtime);
      m.trainer->Step();  // warm-up: allocations, first-touch
    }
    for (int r = 0; r < rounds; ++r) {
      for (Mode& m : modes) {
        for (int s = 0; s < steps; ++s) {
          const StepMetrics metrics = m.trainer->Step();
          // The job's step ends when its slowest rank's does; the wait likewise.
          torch::Tensor t =
              torch::tensor({metrics.step_seconds, m.trainer->grad_sync().finish_seconds()}, torch::kDouble);
          runtime.world().AllReduce(t, ReduceOp::kMax);
          m.step.push_back(t[0].item<double>());
          m.wait.push_back(t[1].item<double>());
          m.overlapped = m.trainer->grad_sync().overlapped_buckets();
          m.buckets = m.trainer->grad_sync().num_buckets();
        }
      }
    }
    std::vector<double> state;
    for (Mode& m : modes) {
      torch::Tensor t = torch::full({1}, static_cast<double>(m.trainer->optimizer().state_bytes()), torch::kDouble);
      runtime.world().AllReduce(t, ReduceOp::kMax);
      state.push_back(t.item<double>() / (1 << 20));
    }
    if (env.rank != 0) return 0;
    std::printf("dp = %d, %d rounds x %d steps per mode, modes alternating\n", env.world_size, rounds, steps);
    std::printf("%-26s %10s %10s %10s %12s %14s %10s\n", "mode", "step s", "x base", "wait s", "x base wait",
                "early buckets", "state MiB");
    const double base_step = Median(modes[0].step), base_wait = Median(modes[0].wait);
    for (size_t i = 0; i < modes.size(); ++i) {
      const Mode& m = modes[i];
      std::printf("%-26s %10.3f %10.3f %10.4f %12.3f %8d of %-3d %10.2f\n", m.name.c_str(), Median(m.step),
                  Median(m.step) / base_step, Median(m.wait), Median(m.wait) / base_wait, m.overlapped, m.buckets,
                  state[i]);
    }
    return 0;
  });
}
