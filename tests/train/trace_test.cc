// The job's execution trace: a pp = 2 run traces steps 2-3; rank 0's file must be valid JSON with, per rank and
// traced step, one forward and one backward per microbatch, every send matched by the peer's receive, the step
// phases, non-negative durations, a name for each rank, and the SVG of the pipeline next to it.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "cornstarch/plan/config.h"
#include "cornstarch/dist/runtime.h"
#include "cornstarch/train/trainer.h"
#include "tests/temp_path.h"

using namespace cornstarch;
using cornstarch::testing::TempPath;

TEST_CASE("the merged trace has matched events for every rank", "[trace]") {
  const LaunchEnv env = DetectLaunchEnv();
  REQUIRE(env.world_size == 2);
  const std::string path = TempPath("trace/job.json");
  const Config cfg = LoadConfig("configs/tiny-llava.yaml",
                                {"train.steps=3", "optimizer.warmup_steps=1", "logging.metrics_path=",
                                 "logging.level=warn", "train.num_threads=1", "parallel.pipeline_costs=flops",
                                 "parallel.pipeline=uniform", "logging.trace_path=" + path});
  DistRuntime runtime(cfg.parallel, env, nullptr, nullptr);
  Trainer trainer(cfg, runtime);
  trainer.Run();
  if (env.rank != 0) return;
  std::ifstream in(path);
  const nlohmann::json trace = nlohmann::json::parse(in);
  const int microbatches = 4;  // 16 / 4
  std::map<std::pair<int, int64_t>, std::multiset<std::string>> by_rank_step;
  std::set<int> named;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph") == "M") {
      named.insert(e.at("pid").get<int>());
      continue;
    }
    CHECK(e.at("dur").get<double>() >= 0);
    by_rank_step[{e.at("pid").get<int>(), e.at("args").at("step").get<int64_t>()}].insert(e.at("name").get<std::string>());
  }
  CHECK(named == std::set<int>{0, 1});
  REQUIRE(by_rank_step.size() == 4);  // 2 ranks x steps 2, 3
  for (const auto& [key, names] : by_rank_step) {
    const auto [rank, step] = key;
    INFO("rank " << rank << " step " << step);
    CHECK((step == 2 || step == 3));
    for (const char* phase : {"data", "grad sync", "optimizer"}) CHECK(names.count(phase) == 1);
    const std::string s = std::to_string(rank), peer = std::to_string(1 - rank);
    for (int mb = 0; mb < microbatches; ++mb) {
      const std::string m = std::to_string(mb);
      CHECK(names.count(s + "F" + m) == 1);
      CHECK(names.count(s + "B" + m) == 1);
      // Stage 0 sends activations and receives gradients; stage 1 the reverse. Each has its peer's counterpart.
      const auto& other = by_rank_step.at({1 - rank, step});
      if (rank == 0) {
        CHECK(names.count("0SEND_F" + m + ">1") == 1);
        CHECK(other.count("1RECV_F" + m + ">0") == 1);
        CHECK(names.count("0RECV_B" + m + ">1") == 1);
        CHECK(other.count("1SEND_B" + m + ">0") == 1);
      }
    }
  }
  CHECK(std::filesystem::exists(path + ".svg"));
}
