// Hugging Face weights: an exported model loads back exactly (file, sharded index, through the trainer's config),
// the fused q/k/v of the encoders is the concatenation of the Hugging Face projections (Whisper's missing k bias
// as zeros), tied embeddings fill lm_head, and missing, unexpected or mis-shaped tensors are errors naming the
// file and tensors.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "cornstarch/config/config.h"
#include "cornstarch/io/hf_weights.h"
#include "cornstarch/io/safetensors.h"
#include "cornstarch/model/multimodal_model.h"
#include "cornstarch/train/trainer.h"
#include "cornstarch/util/check.h"
#include "tests/error_of.h"

using namespace cornstarch;
using cornstarch::testing::ErrorOf;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

std::string Tmp(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return (fs::path(dir ? dir : "/tmp") / name).string();
}

Config WithWeights(const std::string& path, std::vector<std::string> more = {}) {
  std::vector<std::string> o = {"model.encoders.vision.type=vision", "model.encoders.audio.type=audio",
                                "model.llm.attention_bias=true",     "model.llm.weights=" + path,
                                "model.encoders.vision.weights=" + path, "model.encoders.audio.weights=" + path};
  o.insert(o.end(), more.begin(), more.end());
  return ParseConfig("", "test.yaml", o);
}

std::map<std::string, torch::Tensor> Params(const MultimodalModel& m) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& [name, p] : m.NamedParameters()) out[name] = p;
  return out;
}

void LoadAll(MultimodalModel& m) {
  for (int c = 0; c < static_cast<int>(m.spec().chains.size()); ++c) LoadHfWeights(m, c);
}

std::map<std::string, torch::Tensor> ReadAll(const std::string& path) {
  std::map<std::string, torch::Tensor> out;
  SafetensorsFile f(path);
  for (const auto& [name, e] : f.header().tensors) out[name] = f.Get(name);
  return out;
}

void Write(const std::string& path, const std::map<std::string, torch::Tensor>& tensors) {
  std::vector<std::pair<std::string, at::Tensor>> list(tensors.begin(), tensors.end());
  WriteSafetensors(path, list);
}

}  // namespace

TEST_CASE("export then load reproduces every tower's weights, from one file or a sharded index", "[hf]") {
  const std::string file = Tmp("hf/model.safetensors");
  fs::create_directories(Tmp("hf"));
  const Config cfg = WithWeights(file);
  MultimodalModel source(cfg.model, 1);
  ExportHfWeights(source, file);
  const auto names = ReadAll(file);
  CHECK(names.count("model.layers.0.self_attn.q_proj.bias"));
  CHECK(names.count("vision_model.encoder.layers.1.mlp.fc2.weight"));
  CHECK(names.count("model.encoder.layers.0.self_attn.k_proj.weight"));
  CHECK(!names.count("model.encoder.layers.0.self_attn.k_proj.bias"));  // Whisper has none
  CHECK(names.count("multi_modal_projector.vision.linear_2.weight"));

  for (const std::string& where : {file, Tmp("hf")}) {  // the file, and its directory
    MultimodalModel target(cfg.model, 2);
    LoadAll(target);
    const auto a = Params(source), b = Params(target);
    for (const auto& [name, p] : a) {
      INFO(where << " " << name);
      // Projectors have no Hugging Face standard and keep their own init (biases start at zero either way).
      if (name.rfind("projector.", 0) != 0) CHECK(torch::equal(p, b.at(name)));
      else if (p.dim() >= 2) CHECK(!torch::equal(p, b.at(name)));
    }
  }
  // Sharded: split the tensors over two files and an index.
  const std::string dir = Tmp("hf-sharded");
  fs::create_directories(dir);
  std::map<std::string, torch::Tensor> first, second;
  nlohmann::json map;
  for (const auto& [name, t] : names) {
    const bool one = name.rfind("model.layers.", 0) == 0;
    (one ? first : second)[name] = t;
    map[name] = one ? "a.safetensors" : "b.safetensors";
  }
  Write(dir + "/a.safetensors", first);
  Write(dir + "/b.safetensors", second);
  std::ofstream(dir + "/model.safetensors.index.json") << nlohmann::json{{"weight_map", map}}.dump();
  MultimodalModel sharded(WithWeights(dir).model, 3);
  LoadAll(sharded);
  CHECK(torch::equal(Params(sharded).at("llm.block.1.down.weight"), Params(source).at("llm.block.1.down.weight")));
}

TEST_CASE("Hugging Face projections land in the fused layout; tied embeddings fill lm_head", "[hf]") {
  const std::string file = Tmp("hf-values.safetensors");
  const Config cfg = WithWeights(file);
  MultimodalModel source(cfg.model, 1);
  ExportHfWeights(source, file);
  auto t = ReadAll(file);
  const std::string sv = "vision_model.encoder.layers.0.self_attn.", wa = "model.encoder.layers.0.self_attn.";
  for (const char* m : {"q", "k", "v"}) {
    t[sv + m + "_proj.weight"] = torch::randn_like(t[sv + m + "_proj.weight"]);
    t[wa + m + "_proj.weight"] = torch::randn_like(t[wa + m + "_proj.weight"]);
  }
  t[wa + "q_proj.bias"] = torch::randn_like(t[wa + "q_proj.bias"]);
  t.erase("lm_head.weight");
  Write(file, t);
  MultimodalModel target(cfg.model, 2);
  LoadAll(target);
  const auto p = Params(target);
  CHECK(torch::equal(p.at("encoder.vision.block.0.qkv.weight"),
                     torch::cat({t[sv + "q_proj.weight"], t[sv + "k_proj.weight"], t[sv + "v_proj.weight"]})));
  CHECK(torch::equal(p.at("encoder.audio.block.0.qkv.weight"),
                     torch::cat({t[wa + "q_proj.weight"], t[wa + "k_proj.weight"], t[wa + "v_proj.weight"]})));
  const int64_t d = cfg.model.encoders[1].hidden_size;
  CHECK(torch::equal(p.at("encoder.audio.block.0.qkv.bias").narrow(0, d, d), torch::zeros({d})));
  CHECK(torch::equal(p.at("encoder.audio.block.0.qkv.bias").narrow(0, 0, d), t[wa + "q_proj.bias"]));
  CHECK(torch::equal(p.at("llm.head.out.weight"), t["model.embed_tokens.weight"]));
}

TEST_CASE("missing, unexpected and mis-shaped tensors are errors naming the file and tensors", "[hf]") {
  const std::string file = Tmp("hf-good.safetensors");
  const Config cfg = WithWeights(file);
  MultimodalModel source(cfg.model, 1);
  ExportHfWeights(source, file);
  const auto good = ReadAll(file);
  auto load = [&](const std::string& name, const std::function<void(std::map<std::string, torch::Tensor>&)>& edit,
                  std::vector<std::string> more = {}) {
    auto t = good;
    edit(t);
    const std::string path = Tmp(name);
    Write(path, t);
    return ErrorOf([&] {
      MultimodalModel m(WithWeights(path, more).model, 2);
      LoadAll(m);
    });
  };
  CHECK(load("ok.st", [](auto&) {}) == "no error");
  CHECK_THAT(load("missing.st", [](auto& t) { t.erase("model.layers.1.mlp.up_proj.weight"); }),
             Contains("missing.st: missing tensors for model.llm: model.layers.1.mlp.up_proj.weight"));
  CHECK_THAT(load("extra.st", [](auto& t) { t["model.layers.7.input_layernorm.weight"] = torch::ones({128}); }),
             Contains("extra.st: tensors model.llm has no place for") &&
                 Contains("model.layers.7.input_layernorm.weight"));
  CHECK_THAT(load("clip.st", [](auto& t) { t["vision_model.pre_layrnorm.weight"] = torch::ones({64}); }),
             Contains("tensors model.encoders.vision has no place for") && Contains("vision_model.pre_layrnorm.weight"));
  CHECK_THAT(load("shape.st", [](auto& t) { t["model.layers.0.mlp.gate_proj.weight"] = torch::ones({300, 128}); }),
             Contains("shape.st: model.layers.0.mlp.gate_proj.weight is [300, 128], but llm.block.0.gate.weight "
                      "needs [352, 128]; check model.llm against the checkpoint's config"));
  CHECK(load("rope.st", [](auto& t) { t["model.layers.0.self_attn.rotary_emb.inv_freq"] = torch::ones({16}); }) ==
        "no error");
  // A prefix selects a tower inside a bigger checkpoint (LLaVA's language_model. / vision_tower.).
  CHECK(load("prefixed.st",
             [](auto& t) {
               std::map<std::string, torch::Tensor> moved;
               for (auto& [name, v] : t) moved[(name.rfind("vision_model.", 0) == 0 ? "vision_tower." : "") + name] = v;
               t = moved;
             },
             {"model.encoders.vision.weights_prefix=vision_tower."}) == "no error");
  fs::create_directories(Tmp("empty-dir"));
  CHECK_THAT(ErrorOf([&] {
               MultimodalModel m(WithWeights(Tmp("empty-dir")).model, 2);
               LoadHfWeights(m, 2);
             }),
             Contains("empty-dir: neither model.safetensors nor model.safetensors.index.json"));
}

TEST_CASE("a trained model exported by the trainer starts the next run", "[hf]") {
  const std::string dir = Tmp("hf-export");
  fs::remove_all(dir);
  const std::vector<std::string> base = {"train.steps=2", "optimizer.warmup_steps=1", "logging.metrics_path=",
                                         "logging.level=warn", "train.num_threads=1",
                                         "model.encoders.vision.type=vision"};
  std::vector<std::string> first = base;
  first.push_back("checkpoint.export_hf=" + dir);
  Trainer trained(ParseConfig("", "first.yaml", first));
  trained.Run();
  CHECK(fs::exists(dir + "/model.safetensors.index.json"));
  CHECK(fs::exists(dir + "/model-00001-of-00001.safetensors"));
  std::vector<std::string> second = base;
  second.push_back("model.llm.weights=" + dir);
  second.push_back("model.encoders.vision.weights=" + dir);
  second.push_back("train.seed=5");
  Trainer next(ParseConfig("", "second.yaml", second));
  const auto a = Params(trained.model()), b = Params(next.model());
  for (const auto& [name, p] : a) {
    INFO(name);
    if (name.rfind("projector.", 0) != 0) CHECK(torch::equal(p, b.at(name)));
  }
}
