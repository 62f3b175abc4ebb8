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

#include "cornstarch/plan/config.h"
#include "cornstarch/io/hf_weights.h"
#include "cornstarch/io/safetensors.h"
#include "cornstarch/model/multimodal_model.h"
#include "cornstarch/train/trainer.h"
#include "cornstarch/base/check.h"
#include "tests/error_of.h"
#include "tests/temp_path.h"

using namespace cornstarch;
using cornstarch::testing::ErrorOf;
using Catch::Matchers::Contains;
using cornstarch::testing::TempPath;
namespace fs = std::filesystem;

namespace {

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
  const std::string file = TempPath("hf/model.safetensors");
  fs::create_directories(TempPath("hf"));
  const Config cfg = WithWeights(file);
  MultimodalModel source(cfg.model, 1);
  ExportHfWeights(source, file);
  const auto names = ReadAll(file);
  CHECK(names.count("model.layers.0.self_attn.q_proj.bias"));
  CHECK(names.count("vision_model.encoder.layers.1.mlp.fc2.weight"));
  CHECK(names.count("model.encoder.layers.0.self_attn.k_proj.weight"));
  CHECK(!names.count("model.encoder.layers.0.self_attn.k_proj.bias"));  // Whisper has none
  CHECK(names.count("multi_modal_projector.vision.linear_2.weight"));

  for (const std::string& where : {file, TempPath("hf")}) {  // the file, and its directory
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
  const std::string dir = TempPath("hf-sharded");
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

TEST_CASE("a SigLIP tower loads into a packed tower: its position table resized, or left out under rope_2d",
          "[hf][dynamic]") {
  const std::string file = TempPath("hf-dynamic.safetensors");
  MultimodalModel source(WithWeights(file).model, 1);
  ExportHfWeights(source, file);
  for (const std::string positions : {"interpolate", "rope_2d"}) {
    INFO(positions);
    MultimodalModel target(WithWeights(file, {"model.encoders.vision.dynamic_resolution=true",
                                              "model.encoders.vision.dynamic_positions=" + positions})
                               .model,
                           2);
    LoadHfWeights(target, 0);  // the vision chain; under rope_2d the table is known and not loaded
    const auto a = Params(source), b = Params(target);
    int compared = 0;
    for (const auto& [name, p] : b) {
      if (name.rfind("encoder.vision.", 0) != 0) continue;
      INFO(name);
      CHECK(torch::equal(p, a.at(name)));
      ++compared;
    }
    CHECK(b.count("encoder.vision.embed.position") == (positions == "interpolate" ? 1u : 0u));
    CHECK(compared > 10);
  }
}

TEST_CASE("Hugging Face projections land in the fused layout; tied embeddings fill lm_head", "[hf]") {
  const std::string file = TempPath("hf-values.safetensors");
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
  const std::string file = TempPath("hf-good.safetensors");
  const Config cfg = WithWeights(file);
  MultimodalModel source(cfg.model, 1);
  ExportHfWeights(source, file);
  const auto good = ReadAll(file);
  auto load = [&](const std::string& name, const std::function<void(std::map<std::string, torch::Tensor>&)>& edit,
                  std::vector<std::string> more = {}) {
    auto t = good;
    edit(t);
    const std::string path = TempPath(name);
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
  fs::create_directories(TempPath("empty-dir"));
  CHECK_THAT(ErrorOf([&] {
               MultimodalModel m(WithWeights(TempPath("empty-dir")).model, 2);
               LoadHfWeights(m, 2);
             }),
             Contains("empty-dir: neither model.safetensors nor model.safetensors.index.json"));
}

TEST_CASE("a trained model exported by the trainer starts the next run", "[hf]") {
  const std::string dir = TempPath("hf-export");
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

namespace {

// A CLIP vision tower in Hugging Face's names, written from CLIP's definition (not from our name map): class
// embedding, patch conv without bias, one position per patch plus the class token, pre_layrnorm, `layers`
// blocks, post_layernorm; and what CLIP checkpoints also carry (position_ids, the text tower, logit_scale).
std::map<std::string, torch::Tensor> ClipCheckpoint(int64_t d, int64_t ff, int64_t patch, int64_t positions, int layers) {
  torch::manual_seed(11);
  auto r = [](std::vector<int64_t> shape) { return 0.3 * torch::randn(shape); };
  const std::string v = "vision_tower.vision_model.";
  std::map<std::string, torch::Tensor> t = {
      {v + "embeddings.class_embedding", r({d})},
      {v + "embeddings.patch_embedding.weight", r({d, 3, patch, patch})},
      {v + "embeddings.position_embedding.weight", r({positions, d})},
      {v + "embeddings.position_ids", torch::arange(positions).unsqueeze(0)},
      {v + "pre_layrnorm.weight", 1 + r({d})},
      {v + "pre_layrnorm.bias", r({d})},
      {v + "post_layernorm.weight", 1 + r({d})},
      {v + "post_layernorm.bias", r({d})},
      {"vision_tower.text_model.embeddings.token_embedding.weight", r({10, d})},
      {"vision_tower.logit_scale", torch::ones({})},
  };
  for (int i = 0; i < layers; ++i) {
    const std::string p = v + "encoder.layers." + std::to_string(i) + ".";
    for (const char* n : {"layer_norm1", "layer_norm2"}) {
      t[p + n + ".weight"] = 1 + r({d});
      t[p + n + ".bias"] = r({d});
    }
    for (const char* n : {"q_proj", "k_proj", "v_proj", "out_proj"}) {
      t[p + "self_attn." + n + ".weight"] = r({d, d});
      t[p + "self_attn." + n + ".bias"] = r({d});
    }
    t[p + "mlp.fc1.weight"] = r({ff, d});
    t[p + "mlp.fc1.bias"] = r({ff});
    t[p + "mlp.fc2.weight"] = r({d, ff});
    t[p + "mlp.fc2.bias"] = r({d});
  }
  return t;
}

// CLIPVisionTransformer up to hidden_states[-2] with LLaVA's "default" selection (class token dropped), in
// float64 from the checkpoint's tensors.
torch::Tensor ClipReference(std::map<std::string, torch::Tensor> t, const torch::Tensor& pixels, int64_t heads,
                            int64_t patch, double eps, int layers) {
  for (auto& [name, v] : t) v = v.to(torch::kDouble);
  const std::string v = "vision_tower.vision_model.";
  const int64_t n = pixels.size(0), d = t[v + "embeddings.class_embedding"].size(0), hd = d / heads;
  torch::Tensor h = torch::conv2d(pixels.to(torch::kDouble), t[v + "embeddings.patch_embedding.weight"], {}, patch)
                        .flatten(2)
                        .transpose(1, 2);
  h = torch::cat({t[v + "embeddings.class_embedding"].expand({n, 1, d}), h}, 1) +
      t[v + "embeddings.position_embedding.weight"];
  const auto ln = [&](const torch::Tensor& x, const std::string& name) {
    return torch::layer_norm(x, {d}, t[name + ".weight"], t[name + ".bias"], eps);
  };
  const auto lin = [&](const torch::Tensor& x, const std::string& name) {
    return torch::matmul(x, t[name + ".weight"].t()) + t[name + ".bias"];
  };
  h = ln(h, v + "pre_layrnorm");
  const int64_t s = h.size(1);
  for (int i = 0; i < layers; ++i) {
    const std::string p = v + "encoder.layers." + std::to_string(i) + ".";
    const torch::Tensor x = ln(h, p + "layer_norm1");
    auto split = [&](const char* m) { return lin(x, p + "self_attn." + m).view({n, s, heads, hd}).transpose(1, 2); };
    const torch::Tensor q = split("q_proj") * std::pow(static_cast<double>(hd), -0.5);
    const torch::Tensor a = torch::matmul(torch::softmax(torch::matmul(q, split("k_proj").transpose(-1, -2)), -1),
                                          split("v_proj"));
    h = h + lin(a.transpose(1, 2).reshape({n, s, d}), p + "self_attn.out_proj");
    const torch::Tensor u = lin(ln(h, p + "layer_norm2"), p + "mlp.fc1");
    h = h + lin(u * torch::sigmoid(1.702 * u), p + "mlp.fc2");
  }
  return h.slice(1, 1);
}

// The tower's output (what its projector reads) for `pixels`.
torch::Tensor TowerFeatures(MultimodalModel& m, int chain, torch::Tensor x) {
  ForwardContext ctx;
  const ChainSpec& c = m.spec().chains[chain];
  for (int i = c.begin; i < c.end - 1; ++i) x = m.RunLayer(i, x, ctx);
  return x;
}

}  // namespace

TEST_CASE("a CLIP tower loads from Hugging Face names and computes CLIP's penultimate-layer patch features", "[hf]") {
  const int64_t d = 16, ff = 32, patch = 4, heads = 2;
  const std::string file = TempPath("clip.safetensors");
  const auto ckpt = ClipCheckpoint(d, ff, patch, 10, 3);  // 3 x 3 patches + the class token; 3 blocks
  Write(file, ckpt);
  const std::vector<std::string> clip = {
      "model.encoders.vision.type=vision", "model.encoders.vision.vision_style=clip",
      "model.encoders.vision.hidden_act=quick_gelu", "model.encoders.vision.post_norm=false",
      "model.encoders.vision.hidden_size=16", "model.encoders.vision.intermediate_size=32",
      "model.encoders.vision.num_heads=2", "model.encoders.vision.image_size=12",
      "model.encoders.vision.patch_size=4", "model.encoders.vision.num_layers=3",
      "model.encoders.vision.feature_layer=-2", "model.encoders.vision.weights=" + file,
      "model.encoders.vision.weights_prefix=vision_tower."};
  const auto config = [&](std::vector<std::string> more) {
    more.insert(more.begin(), clip.begin(), clip.end());
    return ParseConfig("", "clip.yaml", more).model;
  };
  MultimodalModel m(config({}), 3);
  CHECK(m.spec().chains[0].end - m.spec().chains[0].begin == 2 + 2 + 1);  // embed, 2 of 3 blocks, output, projector
  LoadHfWeights(m, 0);
  torch::manual_seed(5);
  const torch::Tensor pixels = torch::randn({2, 3, 12, 12});
  const torch::Tensor ours = TowerFeatures(m, 0, pixels);
  const torch::Tensor expected = ClipReference(ckpt, pixels, heads, patch, 1e-5, 2);
  REQUIRE(ours.sizes() == expected.sizes());  // [2, 9, 16]: the class token is gone
  // float32 against float64 through 2 blocks: 1e-4.
  CHECK(torch::allclose(ours.to(torch::kDouble), expected, 1e-4, 1e-4));
  // The check can fail: the reference run through all 3 blocks differs.
  CHECK(!torch::allclose(ours.to(torch::kDouble), ClipReference(ckpt, pixels, heads, patch, 1e-5, 3), 1e-2, 1e-2));

  // Export writes CLIP's names (no patch bias, class embedding, pre_layrnorm), and they load back.
  const std::string exported = TempPath("clip-export.safetensors");
  ExportHfWeights(m, exported);
  const auto back = ReadAll(exported);
  CHECK(back.count("vision_model.embeddings.class_embedding"));
  CHECK(back.count("vision_model.pre_layrnorm.bias"));
  CHECK(!back.count("vision_model.embeddings.patch_embedding.bias"));
  CHECK(!back.count("vision_model.encoder.layers.2.mlp.fc1.weight"));  // not built
  CHECK(torch::equal(back.at("vision_model.embeddings.class_embedding"),
                     ckpt.at("vision_tower.vision_model.embeddings.class_embedding")));
  // checkpoint.export_dtype bf16: the same tensors, each rounded to bf16 once, stored as BF16.
  ExportHfWeights(m, exported, {}, torch::kBFloat16);
  const auto half = ReadAll(exported);
  REQUIRE(half.size() == back.size());
  for (const auto& [name, t] : back) {
    INFO(name);
    CHECK(half.at(name).scalar_type() == torch::kBFloat16);
    CHECK(torch::equal(half.at(name), t.to(torch::kBFloat16)));
  }

  // Without feature_layer the third block is loaded and run: full-depth features.
  MultimodalModel full(config({"model.encoders.vision.feature_layer=-1"}), 3);
  LoadHfWeights(full, 0);
  CHECK(torch::allclose(TowerFeatures(full, 0, pixels).to(torch::kDouble),
                        ClipReference(ckpt, pixels, heads, patch, 1e-5, 3), 1e-4, 1e-4));
  // A checkpoint deeper than num_layers is still an error; so is a SigLIP-style config on a CLIP checkpoint.
  CHECK_THAT(ErrorOf([&] {
               MultimodalModel shallow(config({"model.encoders.vision.num_layers=2", "model.encoders.vision.feature_layer=-1"}), 3);
               LoadHfWeights(shallow, 0);
             }),
             Contains("has no place for") && Contains("vision_tower.vision_model.encoder.layers.2."));
  CHECK_THAT(ErrorOf([&] {
               MultimodalModel siglip(config({"model.encoders.vision.vision_style=siglip"}), 3);
               LoadHfWeights(siglip, 0);
             }),
             Contains("clip.safetensors: vision_tower.vision_model.embeddings.position_embedding.weight is [10, 16], "
                      "but encoder.vision.embed.position needs [9, 16]"));
}

TEST_CASE("Whisper's embed_positions are compared with our sinusoids, not ignored", "[hf]") {
  const std::string file = TempPath("whisper.safetensors");
  const Config cfg = ParseConfig("", "w.yaml", {"model.encoders.audio.type=audio", "model.encoders.audio.weights=" + file,
                                                 "model.encoders.audio.hidden_size=16", "model.encoders.audio.num_heads=2",
                                                 "model.encoders.audio.num_frames=8"});
  MultimodalModel source(cfg.model, 1);
  ExportHfWeights(source, file);
  const auto good = ReadAll(file);
  // Whisper's sinusoids(length, channels) as its modeling code computes them (float32), for 10 positions: more
  // than the 4 this encoder uses, as a real checkpoint's 1500.
  const int64_t d = 16;
  const double increment = std::log(10000.0) / static_cast<double>(d / 2 - 1);
  const torch::Tensor inv = torch::exp(-increment * torch::arange(d / 2, torch::kFloat));
  const torch::Tensor scaled = torch::arange(10, torch::kFloat).unsqueeze(1) * inv.unsqueeze(0);
  const torch::Tensor sinusoids = torch::cat({scaled.sin(), scaled.cos()}, 1);
  const auto load = [&](const torch::Tensor& positions) {
    auto t = good;
    t["model.encoder.embed_positions.weight"] = positions;
    Write(file, t);
    return ErrorOf([&] {
      MultimodalModel m(cfg.model, 2);
      LoadHfWeights(m, 0);
    });
  };
  CHECK(load(sinusoids) == "no error");
  CHECK(load(sinusoids.to(torch::kBFloat16)) == "no error");  // bf16 storage rounds within the tolerance
  torch::Tensor learned = sinusoids.clone();
  learned[2][5] += 0.1;
  CHECK_THAT(load(learned), Contains("whisper.safetensors: model.encoder.embed_positions.weight differs from "
                                     "Whisper's sinusoidal positions by 0.1") &&
                                Contains("at position 2; this encoder computes them and cannot take learned ones"));
  learned = sinusoids.clone();
  learned[7][5] += 0.1;  // beyond the 4 positions used
  CHECK(load(learned) == "no error");
  CHECK_THAT(load(sinusoids.narrow(0, 0, 3)),
             Contains("embed_positions.weight is [3, 16], but the encoder needs at least [4, 16]"));
}
