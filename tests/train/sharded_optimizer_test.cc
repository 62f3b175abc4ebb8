// The sharded optimizer (ZeRO-1) and overlapped gradient sync, under mpirun with 2 and 4 ranks.
//
// Per layout with dp > 1 (dp = 2; dp = 4, pp x dp and cp x dp), four runs of 20 steps: unsharded with the
// gradient sums after backward (the reference), unsharded overlapped, sharded overlapped, sharded after backward.
// Overlapped and post-hoc sums are the same collectives on the same buffers: bitwise the same curve. Sharded
// against unsharded: 1e-6 relative on every loss (reduce-scatter instead of all-reduce, and the shards' squared
// norms added in another order, are the only differences); the shards' optimizer state adds up to the unsharded
// state and each rank holds ~1/dp of it. Small gradient buckets (50 KiB) make many of them, so bucket order,
// padding and slices inside parameters are all exercised.
//
// Checkpoints: a sharded run's checkpoint resumes sharded (bitwise), unsharded on the same dp (1e-6), in a single
// process (1e-5, another layout) and on another dp; an unsharded checkpoint resumes sharded (1e-6). With tp = 2 x
// dp = 2 (the moments of tp slices assembled over dp before they are written): resumed bitwise on the same layout,
// sharded on dp = 4 without tp, and from the pp = 2 x dp = 2 run's checkpoint (ranges of whole tensors cut into
// ranges of tp slices), 1e-5.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <filesystem>

#include "cornstarch/dist/runtime.h"
#include "cornstarch/model/multimodal_model.h"
#include "cornstarch/plan/config.h"
#include "cornstarch/train/adamw.h"
#include "cornstarch/train/checkpoint.h"
#include "cornstarch/train/grad_sync.h"
#include "cornstarch/train/trainer.h"
#include "tests/loss_curve.h"
#include "tests/temp_path.h"

using namespace cornstarch;
using cornstarch::testing::CheckSameCurve;
using cornstarch::testing::TempPath;
namespace fs = std::filesystem;

namespace {

struct Layout {
  std::string config;
  std::vector<std::string> overrides;
};

Config MakeConfig(const Layout& layout, std::vector<std::string> more) {
  // lr 1e-3 as in the layout parity test (no loss spikes amplifying summation order); FLOP costs so that every
  // run plans the same stages.
  std::vector<std::string> o = {"train.steps=20",
                                "optimizer.warmup_steps=2",
                                "optimizer.lr=1e-3",
                                "optimizer.min_lr=1e-4",
                                "train.micro_batch_size=2",
                                "train.global_batch_size=8",
                                "train.num_threads=1",
                                "logging.metrics_path=",
                                "logging.level=warn",
                                "parallel.timeout_seconds=120",
                                "parallel.grad_bucket_mib=0.05",
                                "parallel.pipeline_costs=flops"};
  o.insert(o.end(), layout.overrides.begin(), layout.overrides.end());
  o.insert(o.end(), more.begin(), more.end());
  return LoadConfig(layout.config, o);
}

double Sum(Communicator& group, double v) {
  torch::Tensor t = torch::full({1}, v, torch::kDouble);
  group.AllReduce(t, ReduceOp::kSum);
  return t.item<double>();
}

double Max(Communicator& group, double v) {
  torch::Tensor t = torch::full({1}, v, torch::kDouble);
  group.AllReduce(t, ReduceOp::kMax);
  return t.item<double>();
}

std::vector<Layout> LayoutsFor(int world) {
  const std::string tiny = "configs/tiny.yaml", llava = "configs/tiny-llava.yaml";
  if (world == 2)
    return {{tiny, {"parallel.dp=2"}},
            {llava, {"parallel.pp=1", "parallel.dp=2", "model.encoders.vision.frozen=false"}}};
  if (world == 4) {
    return {{tiny, {"parallel.dp=4"}},
            {llava, {"parallel.pp=2", "parallel.dp=2"}},
            // The frozen vision tower on a stage of its own: no trainable parameter there, nothing to shard.
            {llava, {"parallel.pp=2", "parallel.dp=2", "model.encoders.vision.projector.frozen=true"}},
            {tiny, {"parallel.cp=2", "parallel.dp=2", "parallel.cp_block=32"}},
            // Sharded over dp, split over tp: each dp group shards its tp slices.
            {llava, {"parallel.pp=1", "parallel.tp=2", "parallel.dp=2", "model.encoders.vision.frozen=false"}}};
  }
  FAIL("no layouts for " << world << " ranks");
  return {};
}

}  // namespace

TEST_CASE("the sharded optimizer matches the unsharded one, and overlapped gradient sync the post-hoc one bitwise",
          "[zero1][overlap]") {
  const LaunchEnv env = DetectLaunchEnv();
  for (const Layout& layout : LayoutsFor(env.world_size)) {
    std::string label = layout.config;
    for (const std::string& o : layout.overrides) label += " " + o;
    INFO(label);
    const Config reference_cfg = MakeConfig(layout, {"parallel.overlap_grad_sync=false"});
    DistRuntime runtime(reference_cfg.parallel, env, nullptr, nullptr);
    Communicator& dp = runtime.group(Axis::kDP);

    Trainer reference(reference_cfg, runtime);
    const std::vector<StepMetrics> expected = reference.Run();
    {
      INFO("unsharded, overlapped");
      Trainer overlapped(MakeConfig(layout, {}), runtime);
      CheckSameCurve(overlapped.Run(), expected, 0);
      // The buckets did start under backward: on the LLM's last stage the first bucket (its last layers) always.
      const GradSync& sync = overlapped.grad_sync();
      INFO(sync.overlapped_buckets() << " of " << sync.num_buckets() << " buckets started during backward");
      if (!overlapped.optimizer().params().empty()) CHECK(sync.num_buckets() > 1);
      if (runtime.coord().pp == runtime.dims().degree(Axis::kPP) - 1) CHECK(sync.overlapped_buckets() > 0);
    }
    Trainer sharded(MakeConfig(layout, {"optimizer.shard=true"}), runtime);
    const std::vector<StepMetrics> sharded_curve = sharded.Run();
    {
      INFO("sharded against unsharded");
      CheckSameCurve(sharded_curve, expected, 1e-6);
      // Replicas agree on every weight (the all-gather gave each the owners' updates), and match the reference.
      const auto params = sharded.model().NamedParameters(), ref = reference.model().NamedParameters();
      REQUIRE(params.size() == ref.size());
      for (size_t i = 0; i < params.size(); ++i) {
        INFO(params[i].first);
        CHECK(torch::allclose(params[i].second, ref[i].second, /*rtol=*/1e-4, /*atol=*/1e-5));
        torch::Tensor spread = params[i].second.detach().clone();
        torch::Tensor low = -spread;
        dp.AllReduce(spread, ReduceOp::kMax);
        dp.AllReduce(low, ReduceOp::kMax);
        CHECK(torch::equal(spread, -low));
      }
      // The state: every element once over the replicas, ~1/dp on each (a bucket pads fewer than dp elements).
      const double full = static_cast<double>(reference.optimizer().state_bytes());
      const double mine = static_cast<double>(sharded.optimizer().state_bytes());
      CHECK(Sum(dp, mine) == full);
      CHECK(Max(dp, mine) <= full / dp.size() + 8.0 * dp.size() * sharded.grad_sync().num_buckets());
    }
    {
      INFO("sharded, post-hoc against sharded, overlapped");
      Trainer posthoc(MakeConfig(layout, {"optimizer.shard=true", "parallel.overlap_grad_sync=false"}), runtime);
      CheckSameCurve(posthoc.Run(), sharded_curve, 0);
    }
  }
}

TEST_CASE("checkpoints of a sharded run resume sharded, unsharded and on other layouts", "[zero1][checkpoint]") {
  const LaunchEnv env = DetectLaunchEnv();
  const std::string base = "configs/tiny-llava.yaml";
  // Every run: 8 steps, a checkpoint every 3 (and after the last); the resumed ones continue from step 6.
  auto config = [&](const std::string& dir, std::vector<std::string> more) {
    more.insert(more.end(), {"train.steps=8", "checkpoint.dir=" + dir, "checkpoint.interval=3"});
    return MakeConfig({base, {"parallel.pp=1"}}, more);  // tiny-llava.yaml has pp = 2
  };
  auto step6 = [](const std::string& dir) { return dir + "/" + CheckpointDirName(6); };
  auto check_continues = [](const std::vector<StepMetrics>& got, const std::vector<StepMetrics>& expected,
                            double rtol) {
    REQUIRE(got.size() == 2);
    CheckSameCurve(got, expected, rtol, 6);
  };
  const LaunchEnv solo_env{};
  const std::string rank = std::to_string(env.rank);
  if (env.world_size == 2) {
    const std::string sharded_dir = TempPath("sharded-dp2"), plain_dir = TempPath("plain-dp2");
    const Config sharded_cfg = config(sharded_dir, {"parallel.dp=2", "optimizer.shard=true"});
    DistRuntime runtime(sharded_cfg.parallel, env, nullptr, nullptr);
    const std::vector<StepMetrics> sharded = Trainer(sharded_cfg, runtime).Run();
    // Each dp rank wrote its slices: two shards for the one stage.
    CHECK(fs::exists(step6(sharded_dir) + "/stage-0.safetensors"));
    CHECK(fs::exists(step6(sharded_dir) + "/stage-0-dp-1.safetensors"));
    {
      INFO("sharded dp = 2 from its own checkpoint: bitwise");
      Trainer t(
          config(TempPath("r1"), {"parallel.dp=2", "optimizer.shard=true", "checkpoint.resume=" + step6(sharded_dir)}),
          runtime);
      check_continues(t.Run(), sharded, 0);
    }
    {
      INFO("unsharded dp = 2 from the sharded checkpoint");
      Trainer t(config(TempPath("r2"), {"parallel.dp=2", "checkpoint.resume=" + step6(sharded_dir)}), runtime);
      check_continues(t.Run(), sharded, 1e-6);
    }
    {
      INFO("one process from the sharded checkpoint");
      Trainer t(config(TempPath("r3-" + rank), {"checkpoint.resume=" + step6(sharded_dir)}));
      check_continues(t.Run(), sharded, 1e-5);
    }
    {
      INFO("sharded dp = 2 from an unsharded checkpoint");
      const std::vector<StepMetrics> plain = Trainer(config(plain_dir, {"parallel.dp=2"}), runtime).Run();
      Trainer t(
          config(TempPath("r4"), {"parallel.dp=2", "optimizer.shard=true", "checkpoint.resume=" + step6(plain_dir)}),
          runtime);
      check_continues(t.Run(), plain, 1e-6);
    }
  } else {
    REQUIRE(env.world_size == 4);
    const std::string dir = TempPath("sharded-pp2-dp2");
    const Config cfg = config(dir, {"parallel.pp=2", "parallel.dp=2", "optimizer.shard=true"});
    DistRuntime runtime(cfg.parallel, env, nullptr, nullptr);
    const std::vector<StepMetrics> expected = Trainer(cfg, runtime).Run();
    {
      INFO("sharded dp = 4 (pp = 1) from the sharded pp = 2 x dp = 2 checkpoint: re-sharded by element range");
      const Config dp4 =
          config(TempPath("r5"), {"parallel.dp=4", "optimizer.shard=true", "checkpoint.resume=" + step6(dir)});
      DistRuntime dp4_runtime(dp4.parallel, env, nullptr, nullptr);
      Trainer t(dp4, dp4_runtime);
      check_continues(t.Run(), expected, 1e-5);
    }
    const std::vector<std::string> tp2_dp2 = {"parallel.tp=2", "parallel.dp=2", "optimizer.shard=true"};
    auto with = [](std::vector<std::string> o, const std::string& more) {
      o.push_back(more);
      return o;
    };
    const std::string tp_dir = TempPath("sharded-tp2-dp2");
    const Config tp_cfg = config(tp_dir, tp2_dp2);
    DistRuntime tp_runtime(tp_cfg.parallel, env, nullptr, nullptr);
    const std::vector<StepMetrics> tp_expected = Trainer(tp_cfg, tp_runtime).Run();
    {
      INFO("sharded tp = 2 x dp = 2 from its own checkpoint: bitwise");
      Trainer t(config(TempPath("r6"), with(tp2_dp2, "checkpoint.resume=" + step6(tp_dir))), tp_runtime);
      check_continues(t.Run(), tp_expected, 0);
    }
    {
      INFO("sharded dp = 4 (tp = 1) from the sharded tp = 2 x dp = 2 checkpoint");
      const Config dp4 =
          config(TempPath("r7"), {"parallel.dp=4", "optimizer.shard=true", "checkpoint.resume=" + step6(tp_dir)});
      DistRuntime dp4_runtime(dp4.parallel, env, nullptr, nullptr);
      Trainer t(dp4, dp4_runtime);
      check_continues(t.Run(), tp_expected, 1e-5);
    }
    {
      INFO("sharded tp = 2 x dp = 2 from the sharded pp = 2 x dp = 2 checkpoint");
      Trainer t(config(TempPath("r8"), with(tp2_dp2, "checkpoint.resume=" + step6(dir))), tp_runtime);
      check_continues(t.Run(), expected, 1e-5);
    }
  }
}
