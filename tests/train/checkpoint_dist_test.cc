// Checkpoints across ranks: a pp = 2 run killed after step 7 and resumed from its step-6 checkpoint continues
// bitwise identically; the same checkpoint resumes on other layouts (pp = 1 in one process, dp = 2, pp = 2
// interleaved), which re-shards by tensor name and matches the uninterrupted pp = 2 run within 1e-5 relative (only
// the order of floating-point sums differs between layouts). A dp = 2 run on streamed LLaVA-style data resumes its data streams
// at the exact sample (bitwise), and one process resumes both streams from that checkpoint.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <filesystem>

#include "cornstarch/data/demo_dataset.h"
#include "cornstarch/plan/config.h"
#include "cornstarch/dist/runtime.h"
#include "cornstarch/train/checkpoint.h"
#include "cornstarch/train/trainer.h"
#include "tests/loss_curve.h"
#include "tests/temp_path.h"

using namespace cornstarch;
using cornstarch::testing::TempPath;
namespace fs = std::filesystem;

namespace {

Config MakeConfig(const std::string& dir, std::vector<std::string> more = {}) {
  // FLOP costs: a profiled plan could differ between the runs compared here.
  std::vector<std::string> o = {"train.steps=8",          "optimizer.warmup_steps=2", "train.micro_batch_size=2",
                                "train.global_batch_size=8", "logging.metrics_path=",  "logging.level=warn",
                                "checkpoint.dir=" + dir,  "train.num_threads=1",     "parallel.pp=2",
                                "parallel.pipeline_costs=flops", "parallel.timeout_seconds=120"};
  o.insert(o.end(), more.begin(), more.end());
  return LoadConfig("configs/tiny-llava.yaml", o);
}

// The last two of the eight steps, continued from the checkpoint after step 6.
void CheckContinues(const std::vector<StepMetrics>& got, const std::vector<StepMetrics>& expected, double eps) {
  REQUIRE(got.size() == 2);
  cornstarch::testing::CheckSameCurve(got, expected, eps, 6);
}

// A run stopped after step 7: its checkpoints at steps 3 and 6 remain (saved as Run() saves them).
void TrainAndStopAfterStep7(const Config& cfg, DistRuntime& runtime) {
  Trainer killed(cfg, runtime);
  for (int i = 1; i <= 7; ++i) {
    killed.Step();
    if (i % 3 == 0) killed.Save();
  }
}

}  // namespace

TEST_CASE("pp = 2 resumes bitwise, and its checkpoint re-shards onto pp = 1 and dp = 2", "[checkpoint]") {
  const LaunchEnv env = DetectLaunchEnv();
  REQUIRE(env.world_size == 2);
  const Config cfg = MakeConfig(TempPath("pp2"));
  DistRuntime runtime(cfg.parallel, env, nullptr, nullptr);
  if (env.rank == 0) fs::remove_all(TempPath("pp2")), fs::remove_all(TempPath("pp2-full"));
  runtime.world().Barrier();

  Trainer full(MakeConfig(TempPath("pp2-full")), runtime);
  const std::vector<StepMetrics> expected = full.Run();
  TrainAndStopAfterStep7(cfg, runtime);
  const std::string step6 = TempPath("pp2") + "/" + CheckpointDirName(6);
  {
    INFO("pp = 2 from its own checkpoint");
    Trainer resumed(MakeConfig(TempPath("pp2"), {"checkpoint.resume=latest"}), runtime);
    CHECK(resumed.step() == 6);
    CheckContinues(resumed.Run(), expected, 0);
  }
  {
    INFO("pp = 1, one process per rank");
    Trainer solo(MakeConfig(TempPath("solo-" + std::to_string(env.rank)),
                            {"parallel.pp=1", "checkpoint.resume=" + step6}));
    CheckContinues(solo.Run(), expected, 1e-5);
  }
  {
    INFO("dp = 2");
    const Config dp2 = MakeConfig(TempPath("dp2"), {"parallel.pp=1", "parallel.dp=2", "checkpoint.resume=" + step6});
    DistRuntime dp_runtime(dp2.parallel, env, nullptr, nullptr);
    Trainer replicas(dp2, dp_runtime);
    CheckContinues(replicas.Run(), expected, 1e-5);
  }
  {
    INFO("pp = 2 interleaved: each rank holds two pieces of the LLM, not the writer's stage");
    Trainer interleaved(MakeConfig(TempPath("interleaved"), {"parallel.schedule=interleaved",
                                                              "parallel.virtual_stages=2", "checkpoint.resume=" + step6}),
                        runtime);
    CheckContinues(interleaved.Run(), expected, 1e-5);
  }
}

TEST_CASE("streamed data: dp = 2 resumes at the exact sample, also in one process", "[checkpoint][data]") {
  const LaunchEnv env = DetectLaunchEnv();
  // Every rank generates the same dataset for itself (the demo writer is deterministic).
  const std::string data = TempPath("stream-data-r" + std::to_string(env.rank));
  fs::remove_all(data);
  WriteDemoDataset(data, {});
  const auto config = [&](const std::string& dir, std::vector<std::string> more) {
    std::vector<std::string> o = {"train.steps=8", "optimizer.warmup_steps=2", "train.micro_batch_size=2",
                                  "train.global_batch_size=8", "logging.metrics_path=", "logging.level=warn",
                                  "checkpoint.dir=" + dir, "train.num_threads=1", "parallel.dp=2",
                                  "parallel.timeout_seconds=120", "data.streams=2", "data.path=" + data +
                                  "/train.jsonl", "data.tokenizer=" + data + "/tokenizer.model"};
    o.insert(o.end(), more.begin(), more.end());
    return LoadConfig("configs/tiny-llava-data.yaml", o);
  };
  const Config cfg = config(TempPath("streams"), {});
  DistRuntime runtime(cfg.parallel, env, nullptr, nullptr);
  if (env.rank == 0) fs::remove_all(TempPath("streams")), fs::remove_all(TempPath("streams-full"));
  runtime.world().Barrier();

  Trainer full(config(TempPath("streams-full"), {}), runtime);
  const std::vector<StepMetrics> expected = full.Run();
  TrainAndStopAfterStep7(cfg, runtime);
  {
    INFO("dp = 2 from its own checkpoint: each rank's streams continue where they were");
    Trainer resumed(config(TempPath("streams"), {"checkpoint.resume=latest"}), runtime);
    CHECK(resumed.step() == 6);
    CheckContinues(resumed.Run(), expected, 0);
  }
  {
    INFO("one process reading both streams from the dp = 2 checkpoint");
    Trainer solo(config(TempPath("streams-solo-" + std::to_string(env.rank)),
                        {"parallel.dp=1", "checkpoint.resume=" + TempPath("streams") + "/" + CheckpointDirName(6)}));
    CheckContinues(solo.Run(), expected, 1e-5);
  }
}
