// Checkpoint and resume in one process: a run stopped after a checkpoint and resumed from it continues bitwise
// identically (losses, weights, optimizer moments compared with ==); old checkpoints are pruned; partial, corrupt
// and mismatched checkpoints are refused with the file named.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "cornstarch/plan/config.h"
#include "cornstarch/model/multimodal_model.h"
#include "cornstarch/train/adamw.h"
#include "cornstarch/train/checkpoint.h"
#include "cornstarch/train/checkpoint_manifest.h"
#include "cornstarch/train/metrics.h"
#include "cornstarch/train/step_logger.h"
#include "cornstarch/train/trainer.h"
#include "cornstarch/base/check.h"
#include "tests/error_of.h"
#include "tests/loss_curve.h"
#include "tests/temp_path.h"

using namespace cornstarch;
using cornstarch::testing::ErrorOf;
using Catch::Matchers::Contains;
using cornstarch::testing::TempPath;
namespace fs = std::filesystem;

namespace {

std::string FreshDir(const std::string& name) {
  const std::string dir = TempPath(name);
  fs::remove_all(dir);
  return dir;
}

Config MakeConfig(const std::string& dir, std::vector<std::string> more = {}) {
  std::vector<std::string> o = {"train.steps=8",          "optimizer.warmup_steps=2", "train.micro_batch_size=4",
                                "train.global_batch_size=8", "logging.metrics_path=",  "logging.level=warn",
                                "checkpoint.dir=" + dir,  "checkpoint.interval=3",   "train.num_threads=1",
                                "model.encoders.audio.frozen=true"};
  o.insert(o.end(), more.begin(), more.end());
  return LoadConfig("configs/tiny.yaml", o);
}

}  // namespace

TEST_CASE("a resumed run continues bitwise identically, and old checkpoints are pruned", "[checkpoint]") {
  const std::string dir = FreshDir("resume");
  Trainer full(MakeConfig(FreshDir("full")));
  const std::vector<StepMetrics> expected = full.Run();

  {
    // The same run, killed after step 7: its checkpoints at steps 3 and 6 remain (saved as Run() saves them).
    Trainer first(MakeConfig(dir));
    for (int i = 1; i <= 7; ++i) {
      first.Step();
      if (i % 3 == 0) first.Save();
    }
  }
  CHECK(CompleteCheckpoints(dir) == std::vector<int64_t>{3, 6});
  Trainer resumed(MakeConfig(dir, {"checkpoint.resume=latest"}));
  CHECK(resumed.step() == 6);
  const std::vector<StepMetrics> got = resumed.Run();
  REQUIRE(got.size() == 2);
  cornstarch::testing::CheckSameCurve(got, expected, 0, 6);  // bitwise
  const auto a = full.model().NamedParameters(), b = resumed.model().NamedParameters();
  for (size_t i = 0; i < a.size(); ++i) CHECK(torch::equal(a[i].second, b[i].second));
  for (size_t i = 0; i < full.optimizer().exp_avg().size(); ++i) {
    CHECK(torch::equal(full.optimizer().exp_avg()[i], resumed.optimizer().exp_avg()[i]));
    CHECK(torch::equal(full.optimizer().exp_avg_sq()[i], resumed.optimizer().exp_avg_sq()[i]));
  }
  CHECK(resumed.optimizer().step_count() == full.optimizer().step_count());
  // keep_last = 2: the end-of-run save of step 8 pushed out step 3.
  CHECK(CompleteCheckpoints(dir) == std::vector<int64_t>{6, 8});
  // Only the trainable parameters have moments; frozen ones have no optimizer state in the shard.
  const std::string shard = dir + "/" + CheckpointDirName(8) + "/stage-0.json";
  std::ifstream in(shard);
  const std::string sidecar((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK_THAT(sidecar, Contains("\"model.encoder.audio.block.0.qkv.weight\""));
  CHECK_THAT(sidecar, Contains("\"exp_avg.encoder.vision.block.0.qkv.weight\""));
  CHECK(sidecar.find("exp_avg.encoder.audio.block.0.qkv.weight") == std::string::npos);
}

TEST_CASE("partial, corrupt and mismatched checkpoints are refused with the file named", "[checkpoint]") {
  const std::string dir = FreshDir("bad");
  Trainer(MakeConfig(dir, {"train.steps=3"})).Run();
  const std::string step = dir + "/" + CheckpointDirName(3);
  auto copy = [&](const std::string& name) {
    const std::string to = dir + "/" + name;
    fs::copy(step, to, fs::copy_options::recursive);
    return to;
  };
  auto resume_from = [&](const std::string& path, const std::vector<std::string>& more = {}) {
    std::vector<std::string> o = {"checkpoint.resume=" + path, "train.steps=8"};
    o.insert(o.end(), more.begin(), more.end());
    return ErrorOf([&] { Trainer t(MakeConfig(FreshDir("unused"), o)); });
  };
  CHECK(resume_from(step) == "no error");

  // A directory a killed save left behind looks like step-N.tmp: "latest" ignores it.
  copy(CheckpointDirName(9) + ".tmp");
  CHECK(CompleteCheckpoints(dir) == std::vector<int64_t>{3});
  const std::string partial = copy("partial");
  fs::remove(partial + "/manifest.json");
  CHECK_THAT(resume_from(partial), Contains(partial + "/manifest.json: missing; the checkpoint is partial"));

  const std::string flipped = copy("flipped");
  {
    std::fstream f(flipped + "/stage-0.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-100, std::ios::end);
    const char c = static_cast<char>(f.get());
    f.seekp(-100, std::ios::end);
    f.put(static_cast<char>(c ^ 0x20));
  }
  CHECK_THAT(resume_from(flipped), Contains(flipped + "/stage-0.safetensors: checksum mismatch"));

  const std::string truncated = copy("truncated");
  fs::resize_file(truncated + "/stage-0.safetensors", fs::file_size(truncated + "/stage-0.safetensors") - 7);
  CHECK_THAT(resume_from(truncated), Contains(truncated + "/stage-0.safetensors: ") &&
                                         Contains("the file is truncated or was replaced"));

  const std::string no_sidecar = copy("no-sidecar");
  fs::remove(no_sidecar + "/stage-0.json");
  CHECK_THAT(resume_from(no_sidecar), Contains(no_sidecar + "/stage-0.json: missing"));

  const std::string garbled = copy("garbled");
  std::ofstream(garbled + "/manifest.json") << "{\"format\": ";
  CHECK_THAT(resume_from(garbled), Contains(garbled + "/manifest.json: malformed"));

  CHECK_THAT(resume_from(step, {"train.seed=7"}),
             Contains(step + ": saved with train.seed=0, the config has 7"));
  CHECK_THAT(resume_from(step, {"model.llm.intermediate_size=320"}),
             Contains(step + "/stage-0.safetensors: tensor 'model.llm.block.0.gate.weight' is Float [352, 128], "
                             "the model needs Float [320, 128]"));
  CHECK_THAT(resume_from(step, {"model.llm.num_layers=3"}),
             Contains(step + ": no tensor 'model.llm.block.2.attn_norm.weight'"));
  CHECK_THAT(resume_from(step, {"train.steps=3"}), Contains("is at step 3, nothing left of train.steps=3"));
  CHECK(ErrorOf([&] { LoadConfig("configs/tiny.yaml", {"checkpoint.resume=latest"}); }) ==
        "checkpoint.resume: 'latest' needs checkpoint.dir to look in, got 'latest'");
  CHECK_THAT(ErrorOf([&] { Trainer t(MakeConfig(FreshDir("empty"), {"checkpoint.resume=latest"})); }),
             Contains("holds no complete checkpoint"));
}

TEST_CASE("manifests, sidecars and piece names from untrusted text", "[checkpoint]") {
  const std::string ok = R"({"format": "cornstarch-checkpoint", "version": 1, "step": 6, "optimizer_step": 6,
      "samples_consumed": 48, "train": {"seed": 0, "global_batch_size": 8}, "shards": ["stage-0", "stage-0-dp-1"]})";
  const CheckpointManifest m = ParseCheckpointManifest(ok, "m.json");
  CHECK(m.step == 6);
  CHECK(m.shards == std::vector<std::string>{"stage-0", "stage-0-dp-1"});
  auto manifest_error = [&](const std::string& from, const std::string& to) {
    std::string text = ok;
    text.replace(text.find(from), from.size(), to);
    return ErrorOf([&] { ParseCheckpointManifest(text, "m.json"); });
  };
  CHECK_THAT(manifest_error("\"stage-0\",", "\"../../etc/passwd\","), Contains("m.json: shard '../../etc/passwd'"));
  CHECK_THAT(manifest_error("\"step\": 6", "\"step\": 4611686018427387904"), Contains("samples_consumed does not match"));
  CHECK_THAT(manifest_error("\"step\": 6", "\"step\": \"6\""), Contains("m.json: missing or mistyped field"));
  // Numbers that are not 64-bit integers are refused, not cast (the fuzzer's find: a cast of 9.7e19 to uint64).
  CHECK_THAT(manifest_error("\"step\": 6", "\"step\": 1e30"),
             Contains("m.json: missing or mistyped field: step must be an integer, got 1e+30"));
  CHECK_THAT(manifest_error("\"step\": 6", "\"step\": 9223372036854775808"),
             Contains("step must be an integer, got 9223372036854775808"));
  CHECK_THAT(ErrorOf([] { ParseShardSidecar(R"({"file": "x", "bytes": 96666666666666666612, "fnv1a64": "0",
                                                  "tensors": []})", "s.json"); }),
             Contains("s.json: missing or mistyped field: bytes must be an integer, got 9.666666666666667e+19"));
  CHECK_THAT(manifest_error("\"version\": 1", "\"version\": 2"), Contains("not a version 1 cornstarch checkpoint"));
  CHECK_THAT(ErrorOf([] { ParseShardSidecar(R"({"file": "/x.safetensors", "bytes": 1, "fnv1a64": "0",
                                                  "tensors": []})", "s.json"); }),
             Contains("s.json: shard file '/x.safetensors' is not a file name"));
  const std::optional<TensorPiece> p = ParsePieceName("exp_avg.llm.head.weight[128:4096]");
  REQUIRE(p);
  CHECK(p->tensor == "exp_avg.llm.head.weight");
  CHECK((p->begin == 128 && p->end == 4096));
  CHECK_FALSE(ParsePieceName("model.llm.head.weight"));
  CHECK_FALSE(ParsePieceName("w[99999999999999999999:1]"));  // not a range that fits: a plain name
  CHECK_FALSE(ParsePieceName("w[-1:3]"));
  CHECK_THAT(ErrorOf([] { ParsePieceName("w[9:3]"); }), Contains("'w[9:3]': the range ends before it begins"));
  // tp slice names round-trip for every cut; anything else is a plain name or a clear error.
  for (const TpSplit split : {TpSplit::kDim0, TpSplit::kDim1, TpSplit::kQkv}) {
    const std::string name = FormatTpSliceName({"exp_avg.encoder.vision.block.0.qkv.weight", 2, 4, split});
    const std::optional<TpSliceName> s = ParseTpSliceName(name);
    REQUIRE(s);
    CHECK(s->tensor == "exp_avg.encoder.vision.block.0.qkv.weight");
    CHECK((s->rank == 2 && s->size == 4 && s->split == split));
  }
  CHECK(FormatTpSliceName({"model.w", 1, 2, TpSplit::kDim1}) == "model.w@tp1/2:dim1");
  CHECK_FALSE(ParseTpSliceName("model.llm.head.weight"));
  CHECK_FALSE(ParseTpSliceName("w@tp-1/2:dim0"));
  CHECK_FALSE(ParseTpSliceName("@tp0/2:dim0"));
  CHECK_THAT(ErrorOf([] { ParseTpSliceName("w@tp2/2:dim0"); }), Contains("'w@tp2/2:dim0': tp rank 2 of 2"));
  CHECK_THAT(ErrorOf([] { ParseTpSliceName("w@tp0/2:rows"); }), Contains("cut 'rows' is none of dim0, dim1, qkv"));
  CHECK_THAT(ErrorOf([] { FormatTpSliceName({"w", 0, 2, TpSplit::kReplicated}); }),
             Contains("a whole tensor has no tp slice name"));
}

TEST_CASE("metrics: CSV with a header; a resumed run keeps the records up to its checkpoint", "[metrics]") {
  const std::string dir = FreshDir("metrics");
  fs::create_directories(dir);
  for (const std::string name : {"m.csv", "m.jsonl"}) {
    const std::string path = dir + "/" + name;
    {
      MetricsWriter w(path);
      for (int64_t s = 1; s <= 5; ++s) w.Write(StepMetrics{s, 1.0 / static_cast<double>(s)});
    }
    {
      MetricsWriter w(path, 3);  // resumed from step 3: steps 4 and 5 are written again
      for (int64_t s = 4; s <= 6; ++s) w.Write(StepMetrics{s, 2.0});
    }
    std::ifstream in(path);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    INFO(name);
    const bool csv = name == "m.csv";
    REQUIRE(lines.size() == (csv ? 7u : 6u));
    if (csv) {
      CHECK(lines[0].rfind("step,loss,lr,grad_norm,", 0) == 0);
      CHECK(lines[1].rfind("1,1,", 0) == 0);
      CHECK(lines[3].rfind("3,0.33333333333333331,", 0) == 0);  // full precision
      CHECK(lines[4].rfind("4,2,", 0) == 0);
    } else {
      CHECK_THAT(lines[2], Contains("\"step\":3"));
      CHECK_THAT(lines[3], Contains("\"loss\":2.0"));
    }
  }
}

TEST_CASE("the step logger writes every step, evaluations only where they ran", "[metrics][eval]") {
  const std::string dir = FreshDir("logger");
  for (const std::string name : {"m.csv", "m.jsonl"}) {
    Config c;
    c.train.steps = 3;
    c.logging.metrics_path = dir + "/" + name;
    c.logging.tensorboard_dir = dir + "/tb-" + name;
    {
      StepLogger logger(c, /*reports=*/true, 0);
      for (int64_t s = 1; s <= 3; ++s) {
        StepMetrics m{s, 3.0 / static_cast<double>(s)};
        if (s == 2) m.eval_loss = std::log(4.0);
        logger.Log(m);
      }
    }
    std::ifstream in(c.logging.metrics_path);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    INFO(name);
    if (name == "m.csv") {
      REQUIRE(lines.size() == 4u);
      CHECK(lines[0].size() > 19);
      CHECK(lines[0].substr(lines[0].size() - 19) == ",eval_loss,eval_ppl");
      CHECK(lines[1].substr(lines[1].size() - 2) == ",,");  // no evaluation at step 1
      CHECK_THAT(lines[2], Contains(",1.3862943611198906,4"));  // ln 4 and e^(ln 4)
    } else {
      REQUIRE(lines.size() == 3u);
      CHECK_THAT(lines[1], Contains("\"eval_loss\":1.3862943611198906"));
      CHECK_THAT(lines[1], Contains("\"eval_ppl\":4.0"));
      CHECK(lines[0].find("eval") == std::string::npos);
      CHECK(lines[2].find("eval") == std::string::npos);
    }
    CHECK(fs::exists(c.logging.tensorboard_dir));
  }
  StepMetrics m{2, 1.0};
  m.eval_loss = std::log(4.0);
  CHECK_THAT(FormatStepLine(m, 3), Contains("| eval_loss 1.3863 | eval_ppl 4.000"));
  CHECK(FormatStepLine(StepMetrics{2, 1.0}, 3).find("eval") == std::string::npos);
}

TEST_CASE("the progress line shows the bar, the count, the percentage and the ETA", "[metrics]") {
  CHECK(FormatProgress(30, 120, 15.0, 1.5, 10) == "[==>       ]  30/120  25% | loss 1.5000 | ETA 0:45");
  CHECK(FormatProgress(120, 120, 60.0, 0.25, 4) == "[====] 120/120 100% | loss 0.2500 | ETA 0:00");
  CHECK(FormatProgress(1, 3, 100.0, 2.0, 3) == "[=> ] 1/3  33% | loss 2.0000 | ETA 3:20");
}
