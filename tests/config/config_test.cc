#include <catch2/catch.hpp>

#include <fstream>

#include "cornstarch/base/check.h"
#include "cornstarch/plan/config.h"
#include "cornstarch/plan/encoder_kind.h"
#include "tests/error_of.h"
#include "tests/temp_path.h"

using cornstarch::Config;
using cornstarch::Error;
using cornstarch::ParseConfig;

namespace {

const char* kBase = R"(
model:
  encoders:
    vision:
      type: vision
    audio:
      type: audio
)";

std::string ErrorOf(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  return cornstarch::testing::ErrorOf([&] { ParseConfig(yaml, "test.yaml", overrides); });
}

}  // namespace

TEST_CASE("defaults fill every field the YAML leaves out", "[config]") {
  const Config c = ParseConfig(kBase, "test.yaml");
  const Config defaults;
  CHECK(c.model.llm.hidden_size == defaults.model.llm.hidden_size);
  CHECK(c.model.llm.num_kv_heads == 2);
  CHECK(c.optimizer.decay == cornstarch::LrDecay::kCosine);
  CHECK(c.train.micro_batch_size == 8);
  REQUIRE(c.model.encoders.size() == 2);
  // Order follows the YAML, not the alphabet.
  CHECK(c.model.encoders[0].name == "vision");
  CHECK(c.model.encoders[1].name == "audio");
  CHECK(c.model.encoders[1].type == cornstarch::EncoderType::kAudio);
  CHECK(c.model.encoders[1].projector.type == cornstarch::ProjectorType::kMlp);
  CHECK(c.parallel.pp == 1);
}

TEST_CASE("--set overrides win over the file and reach nested sections", "[config]") {
  const Config c = ParseConfig(kBase, "test.yaml",
                               {"model.llm.hidden_size=256", "model.encoders.vision.frozen=true",
                                "optimizer.lr=1e-4", "optimizer.min_lr=0", "logging.metrics_path=",
                                "model.encoders.vision.projector.type=linear"});
  CHECK(c.model.llm.hidden_size == 256);
  CHECK(c.model.encoders[0].frozen);
  CHECK_FALSE(c.model.encoders[1].frozen);
  CHECK(c.model.encoders[0].projector.type == cornstarch::ProjectorType::kLinear);
  CHECK(c.optimizer.lr == Approx(1e-4));
  CHECK(c.logging.metrics_path.empty());
}

TEST_CASE("ToYaml writes every field and reads back to the same config", "[config]") {
  const Config c = ParseConfig(kBase, "test.yaml", {"optimizer.eps=1e-7", "train.seed=42"});
  const std::string yaml = cornstarch::ToYaml(c);
  CHECK(yaml.find("rope_theta: 10000.0") != std::string::npos);
  CHECK(yaml.find("eps: 1e-07") != std::string::npos);
  const Config back = ParseConfig(yaml, "roundtrip.yaml");
  CHECK(cornstarch::ToYaml(back) == yaml);
  CHECK(back.train.seed == 42);
}

TEST_CASE("bad configs name the key, what was expected and what was found", "[config]") {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"model.llm.num_heads=3"}, "model.llm.num_heads: must divide hidden_size=128, got 3"},
      {{"model.llm.num_kv_heads=3"}, "model.llm.num_kv_heads: must divide num_heads=4, got 3"},
      {{"model.llm.num_heads=128"},
       "model.llm.num_heads: must leave an even head_dim for RoPE (hidden_size=128), got 128"},
      {{"model.llm.hidden_sise=3"}, "model.llm.hidden_sise: unknown key; did you mean 'hidden_size'?"},
      {{"train.stepz=3"}, "train.stepz: unknown key; did you mean 'steps'?"},
      {{"model.llm.foo=1"},
       "model.llm.foo: unknown key; expected one of: vocab_size, hidden_size, num_layers, num_heads, num_kv_heads, "
       "intermediate_size, rope_theta, rms_norm_eps, attention_bias, frozen, weights, weights_prefix"},
      {{"model.llm.vocab_size=abc"}, "model.llm.vocab_size: expected an integer, got 'abc'"},
      {{"model.llm.vocab_size=2.5"}, "model.llm.vocab_size: expected an integer, got '2.5'"},
      {{"optimizer.lr=fast"}, "optimizer.lr: expected a number, got 'fast'"},
      {{"model.llm.frozen=maybe"}, "model.llm.frozen: expected true or false, got 'maybe'"},
      {{"model.encoders.vision.type=video"},
       "model.encoders.vision.type: must be one of 'vision', 'audio', got 'video'"},
      {{"model.encoders.vision.image_size=30"},
       "model.encoders.vision.image_size: must be a multiple of patch_size=8, got 30"},
      {{"model.encoders.audio.num_frames=31"},
       "model.encoders.audio.num_frames: must be even and at least 2 (the second conv has stride 2), got 31"},
      {{"model.encoders.vision.projector.type=conv"},
       "model.encoders.vision.projector.type: must be one of 'linear', 'mlp', got 'conv'"},
      {{"model.encoders.audio.num_heads=5"}, "model.encoders.audio.num_heads: must divide hidden_size=64, got 5"},
      {{"optimizer.lr=0"}, "optimizer.lr: must be positive, got 0"},
      {{"optimizer.min_lr=1"}, "optimizer.min_lr: must be in [0, lr=0.003], got 1"},
      {{"optimizer.beta2=1"}, "optimizer.beta2: must be in [0, 1), got 1"},
      {{"optimizer.decay=exp"}, "optimizer.decay: must be one of 'cosine', 'linear', 'constant', got 'exp'"},
      {{"optimizer.warmup_steps=500"}, "optimizer.warmup_steps: must be in [0, train.steps=200], got 500"},
      {{"train.global_batch_size=12"},
       "train.global_batch_size: must be a multiple of micro_batch_size * parallel.dp = 8, got 12"},
      {{"parallel.dp=3"},
       "train.global_batch_size: must be a multiple of micro_batch_size * parallel.dp = 24, got 16"},
      {{"parallel.pp=0"}, "parallel.pp: must be at least 1, got 0"},
      {{"parallel.tp=0"}, "parallel.tp: must be at least 1, got 0"},
      {{"parallel.tp=3"},
       "model.llm.num_heads: must be a multiple of parallel.tp=3 (tensor parallelism splits it evenly), got 4"},
      {{"parallel.tp=4"},
       "model.llm.num_kv_heads: must be a multiple of parallel.tp=4 (tensor parallelism splits it evenly), got 2"},
      {{"parallel.tp=2", "model.llm.intermediate_size=351"},
       "model.llm.intermediate_size: must be a multiple of parallel.tp=2 (tensor parallelism splits it evenly), "
       "got 351"},
      {{"parallel.tp=2", "model.llm.vocab_size=255"},
       "model.llm.vocab_size: must be a multiple of parallel.tp=2 (tensor parallelism splits it evenly), got 255"},
      {{"parallel.tp=4", "model.llm.num_kv_heads=4", "model.encoders.vision.type=vision",
        "model.encoders.vision.num_heads=6", "model.encoders.vision.hidden_size=96"},
       "model.encoders.vision.num_heads: must be a multiple of parallel.tp=4 while the tower is sharded (or set "
       "model.encoders.vision.tp: false to run it whole on every tp rank), got 6"},
      {{"train.device=tpu"}, "train.device: must be one of 'cpu', 'cuda', got 'tpu'"},
      {{"train.device=cuda", "parallel.cp=2", "parallel.cp_block=32"},
       "parallel.cp: must be 1 with train.device 'cuda' (context parallelism runs on CPU only so far; pipeline and "
       "data parallelism run on GPUs), got 2"},
      {{"model.encoders.vision.feature_layer=-3"},
       "model.encoders.vision.feature_layer: must be from -1 (the last block) to -num_layers=-2, got -3"},
      {{"model.encoders.vision.feature_layer=0"},
       "model.encoders.vision.feature_layer: must be from -1 (the last block) to -num_layers=-2, got 0"},
      {{"model.encoders.vision.vision_style=dino"},
       "model.encoders.vision.vision_style: must be one of 'siglip', 'clip', got 'dino'"},
      {{"model.encoders.vision.vision_style=clip"},
       "model.encoders.vision.post_norm: must be false with vision_style 'clip' (CLIP's post_layernorm normalises "
       "only the pooled class token), got true"},
      {{"model.encoders.vision.vision_style=clip", "model.encoders.vision.post_norm=false",
        "model.encoders.vision.dynamic_resolution=true"},
       "model.encoders.vision.dynamic_resolution: must be false with vision_style 'clip' (a class token per image is "
       "not supported), got true"},
      {{"model.encoders.vision.dynamic_resolution=true", "model.encoders.vision.dynamic_positions=rope_2d",
        "model.encoders.vision.hidden_size=48", "model.encoders.vision.num_heads=8"},
       "model.encoders.vision.dynamic_positions: must be 'interpolate' when the head size (hidden_size / num_heads = "
       "6) is not a multiple of 4, got 'rope_2d'"},
      {{"model.encoders.vision.dynamic_positions=sincos"},
       "model.encoders.vision.dynamic_positions: must be one of 'interpolate', 'rope_2d', got 'sincos'"},
      {{"model.encoders.vision.max_patches=-1"},
       "model.encoders.vision.max_patches: must be 0 (an image_size square's) or more, got -1"},
      {{"model.encoders.vision.anyres_max_tiles=-1"},
       "model.encoders.vision.anyres_max_tiles: must be 0 (off) or more, got -1"},
      {{"model.encoders.vision.dynamic_resolution=true", "model.encoders.vision.anyres_max_tiles=2"},
       "model.encoders.vision.anyres_max_tiles: must be 0 with dynamic_resolution (tiles are image_size squares), got "
       "2"},
      {{"model.encoders.vision.vision_style=clip", "model.encoders.vision.post_norm=false",
        "model.encoders.vision.anyres_max_tiles=4"},
       "model.encoders.vision.anyres_max_tiles: must be 0 with vision_style 'clip' (a class token per view is not "
       "supported), got 4"},
      {{"model.encoders.audio.type=audio", "model.encoders.audio.dynamic_resolution=true"},
       "model.encoders.audio.dynamic_resolution: must be false for an audio encoder, got true"},
      {{"parallel.cp=2"}, "data.seq_len: must be a multiple of parallel.cp x parallel.cp_block = 256, got 64"},
      {{"parallel.cp_split=ring"}, "parallel.cp_split: must be one of 'balanced', 'zigzag', 'contiguous', got 'ring'"},
      {{"parallel.pipeline=megatron"},
       "parallel.pipeline: must be one of 'frozen_aware', 'uniform', 'colocated', 'frozen_unaware', got "
       "'megatron'"},
      {{"parallel.schedule=zero_bubble"}, "parallel.schedule: must be one of '1f1b', 'interleaved', got 'zero_bubble'"},
      {{"parallel.schedule=interleaved"},
       "parallel.virtual_stages: must be >= 2 with parallel.schedule 'interleaved', got 1"},
      {{"parallel.schedule=interleaved", "parallel.virtual_stages=2"},
       "parallel.pp: must be >= 2 with parallel.schedule 'interleaved', got 1"},
      {{"parallel.virtual_stages=2"},
       "parallel.virtual_stages: must be 1 with parallel.schedule '1f1b' (set schedule: interleaved for more), got 2"},
      {{"checkpoint.keep_last=0"}, "checkpoint.keep_last: must be at least 1, got 0"},
      {{"train.grad_clip_norm=-1"}, "train.grad_clip_norm: must be >= 0 (0 disables clipping), got -1"},
      {{"data.min_prompt_tokens=9"}, "data.max_prompt_tokens: must be >= min_prompt_tokens=9, got 8"},
      {{"data.type=webdataset"}, "data.type: must be one of 'synthetic', 'llava', got 'webdataset'"},
      {{"data.type=llava"}, "data.path: llava data needs its files in either data.path or data.mix (not both), got 'no files'"},
      {{"data.image_mean=0.5"}, "data.image_mean: expected a list of numbers, got '0.5'"},
      {{"data.image_std=[1, x, 1]"}, "data.image_std[1]: expected a number, got 'x'"},
      {{"data.prefetch=-1"}, "data.prefetch: must be >= 0, got -1"},
      {{"cluster.layer_overhead_us=-1"}, "cluster.layer_overhead_us: must be >= 0, got -1"},
      {{"eval.steps=0"}, "eval.steps: must be at least 1, got 0"},
      {{"eval.interval=-1"}, "eval.interval: must be >= 0 (0 evaluates only at the end, if at_end), got -1"},
      {{"eval.at_end=true", "eval.data.type=llava"}, "eval.data.path: llava data needs its files in either eval.data.path or eval.data.mix (not both), got 'no files'"},
      {{"eval.interval=5", "parallel.cp=2", "parallel.cp_block=32", "eval.data.seq_len=96"},
       "eval.data.seq_len: must be a multiple of parallel.cp x parallel.cp_block = 64, got 96"},
      {{"eval.data.type=llava"}, "no error"},  // evaluation off: eval.data is not read
      {{"logging.level=verbose"},
       "logging.level: must be one of 'trace', 'debug', 'info', 'warn', 'error', got 'verbose'"},
      {{"train.steps"}, "--set: expected key.path=value, got 'train.steps'"},
      {{"train.steps.x=1"}, "train.steps: expected an integer, got a mapping"},
  };
  for (const auto& [overrides, expected] : cases) {
    INFO("overrides: " << overrides[0]);
    CHECK(ErrorOf(kBase, overrides) == expected);
  }
}

TEST_CASE("bad YAML documents are reported with their location or key", "[config]") {
  CHECK(ErrorOf("modle:\n  llm: {}\n") == "modle: unknown key; did you mean 'model'?");
  CHECK(ErrorOf("train: 5\n") == "train: expected a mapping, got '5'");
  CHECK(ErrorOf("train: {steps: 5}\n", {"train.steps.x=1"}) == "--set train.steps.x: train.steps is '5', not a section");
  CHECK(ErrorOf("- a\n- b\n") == "test.yaml: expected a mapping of sections at the top, got a list");
  CHECK(ErrorOf("model:\n  encoders:\n    Vision: {type: vision}\n") ==
        "model.encoders.Vision: encoder names must be lower-case identifiers ([a-z][a-z0-9_]*), got 'Vision'");
  CHECK(ErrorOf("model:\n  encoders: [vision]\n") ==
        "model.encoders: expected a mapping from encoder name to encoder, got a list");
  const std::string malformed = ErrorOf("model:\n  llm: [1, 2\ntrain:\n  steps: 3\n");
  CHECK(malformed.rfind("test.yaml:3:", 0) == 0);
  CHECK(malformed.find("malformed YAML") != std::string::npos);
}

TEST_CASE("a missing config file is named", "[config]") {
  CHECK(cornstarch::testing::ErrorOf([] { cornstarch::LoadConfig("/nonexistent/run.yaml"); }) ==
        "/nonexistent/run.yaml: cannot open config file");
}

TEST_CASE("a key given twice is an error naming it and both lines", "[config]") {
  CHECK(ErrorOf("model:\n  encoders:\n    vision: {type: vision}\n    vision: {type: audio}\n") ==
        "model.encoders.vision: key given twice (lines 3 and 4); keep one");
  CHECK(ErrorOf("model:\n  llm:\n    num_layers: 2\n    hidden_size: 64\n    num_layers: 4\n") ==
        "model.llm.num_layers: key given twice (lines 3 and 5); keep one");
  CHECK(ErrorOf("train: {steps: 3}\n# again\ntrain: {steps: 4}\n") == "train: key given twice (lines 1 and 3); keep one");
  CHECK(ErrorOf(kBase) == "no error");
}

TEST_CASE("an empty config file is refused, not run on the defaults", "[config]") {
  for (const std::string text : {"", "\n\n", "# only a comment\n  # and another\n"}) {
    const std::string path = cornstarch::testing::TempPath("empty.yaml");
    std::ofstream(path) << text;
    INFO("text: '" << text << "'");
    CHECK(cornstarch::testing::ErrorOf([&] { cornstarch::LoadConfig(path); }) ==
          path + ": the config file is empty (nothing but comments or blank lines)");
  }
  const std::string path = cornstarch::testing::TempPath("one.yaml");
  std::ofstream(path) << kBase;
  CHECK(cornstarch::LoadConfig(path).model.encoders.size() == 2);
}

TEST_CASE("every encoder type has its kind entry, consistent with itself", "[config][encoders]") {
  for (size_t i = 0; i < std::size(cornstarch::Choices<cornstarch::EncoderType>::names); ++i) {
    const auto type = static_cast<cornstarch::EncoderType>(i);
    INFO(cornstarch::NameOf(type));
    const cornstarch::EncoderKind& kind = cornstarch::KindOf(type);
    CHECK(kind.type == type);
    cornstarch::EncoderConfig e;
    e.type = type;
    CHECK(kind.tokens(e) >= 1);
    CHECK(kind.sequence(e) >= kind.tokens(e));
    CHECK(kind.input_shape(e).size() >= 2);
    CHECK(kind.embedding_flops(e) > 0);
    CHECK(kind.embedding_parameters(e) > 0);
    const cornstarch::HfEncoderNames names = kind.hf_names(e);
    CHECK(names.blocks.rfind(names.root, 0) == 0);  // blocks live under the tower's root
    CHECK(!names.embedding.empty());
    CHECK_NOTHROW(kind.validate(e, "model.encoders.x"));
  }
}
