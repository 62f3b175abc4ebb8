// Pipeline and context parallelism reproduce the single-process run. Under mpirun every rank also trains the
// pp = dp = cp = 1 reference of the same seed in-process, then compares its own stage. Layouts per world size:
// encoders on stages of their own (one encoder, two in parallel), the colocated baseline, uniform counts,
// pp x dp, cp with each split, cp x pp and cp x dp; with frozen encoders, a frozen LLM and everything trainable.
// The real-data config (packed LLaVA-style conversations with images and audio, some sequences without any) runs
// as pp = 2, cp = 2, pp x cp, dp = 2 and pp x dp (each dp rank reading only its own data streams) on a dataset
// each rank generates for itself. Tolerance: 1e-5 relative on every step's loss (only the order of floating-point sums differs: the stages'
// squared gradient norms are added across ranks); weights 1e-4 as in the dp parity test. One layout runs a schedule
// loaded from a file (GPipe) rather than 1F1B; interleaved 1F1B (v = 2) runs on pp = 2 and 4, pp x dp and
// pp x cp. In bf16 (train.precision), pp = 2, cp = 2, dp = 2 and pp x cp
// reproduce the single-process bf16 run to bf16's tolerance (kBf16Rtol below).
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "cornstarch/plan/config.h"
#include "cornstarch/data/demo_dataset.h"
#include "cornstarch/dist/runtime.h"
#include "cornstarch/model/multimodal_model.h"
#include "cornstarch/train/executor.h"
#include "cornstarch/train/trainer.h"
#include "tests/loss_curve.h"
#include "tests/temp_path.h"

using namespace cornstarch;
using cornstarch::testing::CheckSameCurve;
using cornstarch::testing::TempPath;

namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

struct Variant {
  std::string config;
  std::vector<std::string> overrides;
  double rtol = 1e-5;       // every step's loss and evaluation; grad norm and weights to 10 x rtol
  double eval_rtol = 1e-6;  // the evaluation of the initial weights
};

// bf16 layouts against the single-process bf16 run. Stages exchange activations and gradients in bf16 where the
// single process keeps them in fp32, and a last-bit difference of a sum can round a bf16 product the other way
// (unit roundoff 2^-9 = 2e-3), which the following steps carry on: they agree to bf16's rounding, not float's.
// Measured over 10 steps (pp = 2, cp = 2, dp = 2, pp x cp): loss up to 5.6e-4 relative, grad norm 7e-3, the
// evaluation of the initial weights 1.3e-4 (pp: its boundary activations rounded); tolerances a few times that.
constexpr double kBf16Rtol = 3e-3, kBf16EvalRtol = 1e-3;

// Real images at their own resolution (4 x 4 to 5 x 6 patches, at most 24), packed per microbatch.
std::vector<std::string> Dynamic(std::vector<std::string> overrides, const std::string& positions = "interpolate") {
  overrides.insert(overrides.end(), {"model.encoders.vision.dynamic_resolution=true",
                                     "model.encoders.vision.max_patches=24",
                                     "model.encoders.vision.dynamic_positions=" + positions});
  return overrides;
}

// Real images as LLaVA-NeXT's anyres takes them: a base view and two tiles each (48 tokens an image).
std::vector<std::string> Anyres(std::vector<std::string> overrides) {
  overrides.insert(overrides.end(), {"model.encoders.vision.anyres_max_tiles=2", "data.seq_len=256"});
  return overrides;
}

std::vector<Variant> VariantsFor(int world) {
  const std::string tiny = "configs/tiny.yaml", llava = "configs/tiny-llava.yaml", real = "configs/tiny-llava-data.yaml";
  switch (world) {
    case 2:
      return {{llava, {"parallel.pp=2"}},
              {llava, {"parallel.pp=2", "model.llm.frozen=true", "model.encoders.vision.frozen=false"}},
              {tiny, {"parallel.pp=2", "parallel.pipeline=colocated", "model.encoders.audio.frozen=true"}},
              {tiny, {"parallel.pp=1", "parallel.cp=2", "parallel.cp_block=32", "model.encoders.vision.frozen=true"}},
              {llava, {"parallel.pp=1", "parallel.cp=2", "parallel.cp_block=16", "parallel.cp_split=zigzag"}},
              {real, {"parallel.pp=2", "model.encoders.vision.frozen=true"}},
              {real, {"parallel.pp=1", "parallel.cp=2", "parallel.cp_block=32"}},
              {tiny, {"parallel.pp=2", "train.precision=bf16"}, kBf16Rtol, kBf16EvalRtol},
              {tiny, {"parallel.pp=1", "parallel.cp=2", "parallel.cp_block=32", "train.precision=bf16"}, kBf16Rtol,
               kBf16EvalRtol},
              {tiny, {"parallel.pp=1", "parallel.dp=2", "train.precision=bf16"}, kBf16Rtol, kBf16EvalRtol},
              // Gradients summed over dp in bf16 (its rounding on top: tolerance as for bf16).
              {tiny, {"parallel.pp=1", "parallel.dp=2", "train.precision=bf16", "parallel.grad_reduce_dtype=bf16"},
               kBf16Rtol, kBf16EvalRtol},
              {tiny, {"parallel.pp=1", "parallel.dp=2", "train.precision=bf16", "parallel.grad_reduce_dtype=bf16",
                      "optimizer.shard=true"}, kBf16Rtol, kBf16EvalRtol},
              // Each dp rank reads only its own data stream; the single process reads both.
              {real, {"parallel.pp=1", "parallel.dp=2", "data.streams=2"}},
              {llava, {"parallel.pp=2", "model.activation_checkpointing=true"}},
              // A schedule written by hand (GPipe: every forward, then every backward) instead of 1F1B.
              {tiny, {"parallel.pp=2", "parallel.pipeline=colocated",
                      "parallel.schedule_file=configs/schedules/gpipe-2x4.txt"}},
              // Interleaved 1F1B: each rank runs two non-adjacent pieces of the LLM (the encoders on rank 0's).
              {llava, {"parallel.pp=2", "parallel.schedule=interleaved", "parallel.virtual_stages=2"}},
              {real, Dynamic({"parallel.pp=2"})},
              {real, Dynamic({"parallel.pp=1", "parallel.cp=2", "parallel.cp_block=32"}, "rope_2d")},
              {real, Dynamic({"parallel.pp=1", "parallel.dp=2", "data.streams=2"})},
              {real, Anyres({"parallel.pp=2"})}};
    case 3:
      return {{tiny, {"parallel.pp=3"}},
              {tiny, {"parallel.pp=3", "model.encoders.vision.frozen=true", "model.encoders.audio.frozen=true",
                      "model.encoders.audio.projector.frozen=true"}},
              {llava, {"parallel.pp=3", "parallel.pipeline=uniform", "model.llm.frozen=true"}}};
    case 4:
      return {{tiny, {"parallel.pp=4", "model.encoders.vision.frozen=true"}},
              {tiny, {"parallel.pp=4", "parallel.pipeline=colocated", "model.llm.frozen=true"}},
              {llava, {"parallel.pp=4", "parallel.pipeline=uniform"}},
              {llava, {"parallel.pp=2", "parallel.dp=2"}},
              {tiny, {"parallel.pp=1", "parallel.cp=4", "parallel.cp_block=16", "parallel.cp_split=contiguous"}},
              {llava, {"parallel.pp=2", "parallel.cp=2", "parallel.cp_block=32"}},
              {real, {"parallel.pp=2", "parallel.cp=2", "parallel.cp_block=16", "parallel.cp_split=zigzag"}},
              {real, {"parallel.pp=2", "parallel.dp=2", "data.streams=4", "data.workers=2"}},
              {real, Dynamic({"parallel.pp=2", "parallel.cp=2", "parallel.cp_block=16"}, "rope_2d")},
              {real, Anyres({"parallel.pp=2", "parallel.dp=2", "data.streams=4"})},
              {llava, {"parallel.pp=2", "parallel.cp=2", "parallel.cp_block=32", "train.precision=bf16"}, kBf16Rtol,
               kBf16EvalRtol},
              {tiny, {"parallel.pp=1", "parallel.cp=2", "parallel.dp=2", "parallel.cp_block=32",
                      "model.llm.frozen=true"}},
              {llava, {"parallel.pp=2", "parallel.cp=2", "parallel.cp_block=32", "model.activation_checkpointing=true"}},
              // Interleaved 1F1B over 4 ranks (the vision tower on stages of its own, plain), and with dp and cp.
              {llava, {"parallel.pp=4", "parallel.schedule=interleaved", "parallel.virtual_stages=2"}},
              {llava, {"parallel.pp=2", "parallel.dp=2", "parallel.schedule=interleaved", "parallel.virtual_stages=2"}},
              {llava, {"parallel.pp=2", "parallel.cp=2", "parallel.cp_block=32", "parallel.schedule=interleaved",
                       "parallel.virtual_stages=2"}}};
    default:
      FAIL("no pipeline layouts for " << world << " ranks");
      return {};
  }
}

}  // namespace

TEST_CASE("pipeline and context-parallel layouts match the single-process loss curve and final weights", "[pp][cp]") {
  const LaunchEnv env = DetectLaunchEnv();
  for (const Variant& v : VariantsFor(env.world_size)) {
    // One intra-op thread per rank: the ranks already oversubscribe the cores. lr 1e-3 rather than the configs'
    // 3e-3: at 3e-3 some trajectories spike (grad norm x2 in one step) and amplify the layouts' different
    // summation order from 1e-7 to 1e-3 within ten steps, which would measure chaos, not correctness.
    std::vector<std::string> overrides = {"train.steps=10", "optimizer.warmup_steps=2", "optimizer.lr=1e-3",
                                          "optimizer.min_lr=1e-4", "train.micro_batch_size=2",
                                          "train.global_batch_size=8", "train.num_threads=1",
                                          "logging.metrics_path=", "logging.level=warn",
                                          "parallel.timeout_seconds=120"};
    if (v.config == "configs/tiny-llava-data.yaml") {
      static const std::string dir = [&] {
        const std::string d = TempPath("demo-r" + std::to_string(env.rank));
        WriteDemoDataset(d, {});
        return d;
      }();
      overrides.insert(overrides.end(), {"data.path=" + dir + "/train.jsonl", "data.tokenizer=" + dir +
                                         "/tokenizer.model"});
    }
    overrides.insert(overrides.end(), v.overrides.begin(), v.overrides.end());
    Config cfg = LoadConfig(v.config, overrides);
    // Validation on the training data's own format, twice during the run (after steps 5 and 10).
    cfg.eval.data = cfg.data;
    cfg.eval.steps = 2;
    cfg.eval.interval = 5;
    Validate(cfg);
    std::string label = v.config;
    for (const std::string& o : v.overrides) label += " " + o;
    INFO(label);

    Config reference_cfg = cfg;
    reference_cfg.parallel.pp = reference_cfg.parallel.dp = reference_cfg.parallel.cp = 1;
    reference_cfg.model.activation_checkpointing = false;  // recomputing must not change the curve either
    reference_cfg.parallel.schedule_file.clear();  // a schedule file is for the layout's stages
    reference_cfg.parallel.schedule = ScheduleKind::k1F1B;
    reference_cfg.parallel.virtual_stages = 1;
    Trainer reference(reference_cfg);
    const double reference_eval = reference.Evaluate();
    const std::vector<StepMetrics> expected = reference.Run();

    DistRuntime runtime(cfg.parallel, env, nullptr, nullptr);
    Trainer trainer(cfg, runtime);
    // Forward only under the layout, from the same initial weights: the same loss to 1e-6.
    CHECK(trainer.Evaluate() == Approx(reference_eval).epsilon(v.eval_rtol));
    const std::vector<StepMetrics> got = trainer.Run();
    REQUIRE(got.size() == expected.size());
    CheckSameCurve(got, expected, v.rtol);
    std::map<std::string, torch::Tensor> ref_params;
    for (const auto& [name, p] : reference.model().NamedParameters()) ref_params[name] = p;
    const auto params = trainer.model().NamedParameters();
    CHECK(!params.empty());
    for (const auto& [name, p] : params) {
      INFO(name);
      REQUIRE(ref_params.count(name));
      CHECK(torch::allclose(p, ref_params[name], /*rtol=*/10 * v.rtol, /*atol=*/10 * v.rtol));
    }
    if (!cfg.parallel.schedule_file.empty()) {
      // The stage ran the file's order: its forwards and backwards as listed, the communication added.
      const int stage = runtime.coord().pp;
      const Schedule file = ParseSchedule(ReadFile(cfg.parallel.schedule_file), cfg.parallel.schedule_file);
      std::string ran, listed;
      for (const ActionTiming& t : trainer.executor().timings()) {
        if (t.action.type == ActionType::kForward || t.action.type == ActionType::kBackward) {
          ran += t.action.ToString() + " ";
        }
      }
      for (const Action& a : file.at(stage)) listed += a.ToString() + " ";
      CHECK(ran == listed);
    }
    if (cfg.parallel.virtual_stages > 1) {
      // Interleaved: the last rank ran the forwards of both of its LLM stages (the loss stage and one before).
      std::set<int> ran;
      for (const ActionTiming& t : trainer.executor().timings()) ran.insert(t.action.stage);
      const int rank = runtime.coord().pp;
      CHECK(ran.size() == trainer.plan().graph.StagesOf(rank).size());
      if (rank == cfg.parallel.pp - 1) CHECK(ran.size() == 2);
    }
    // A stage holds exactly its planned layers.
    if (cfg.parallel.pp > 1) CHECK(trainer.model().NamedParameters().size() < ref_params.size());
  }
}
