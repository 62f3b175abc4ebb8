#include "cornstarch/model/model_spec.h"

#include "cornstarch/util/check.h"

namespace cornstarch {

int64_t EncoderTokens(const EncoderConfig& encoder) {
  if (encoder.type == "vision") {
    const int64_t side = encoder.image_size / encoder.patch_size;
    return side * side;
  }
  CS_CHECK(encoder.type == "audio", "unknown encoder type ", encoder.type);
  return encoder.num_frames / 2;
}

namespace {

void AddChain(ModelSpec& spec, const std::string& name, bool upstream_needs_graph,
              const std::vector<std::pair<std::string, bool>>& layers_and_trainable,
              const std::vector<std::string>& modules) {
  ChainSpec chain{name, static_cast<int>(spec.layers.size()), 0};
  bool needs_graph = upstream_needs_graph;
  for (size_t i = 0; i < layers_and_trainable.size(); ++i) {
    const auto& [layer_name, trainable] = layers_and_trainable[i];
    needs_graph = needs_graph || trainable;
    spec.layers.push_back({layer_name, modules[i], static_cast<int>(spec.chains.size()), trainable, needs_graph});
  }
  chain.end = static_cast<int>(spec.layers.size());
  spec.chains.push_back(chain);
}

}  // namespace

ModelSpec BuildModelSpec(const ModelConfig& model) {
  ModelSpec spec;
  bool any_encoder_needs_graph = false;
  for (const EncoderConfig& enc : model.encoders) {
    const std::string module = "encoder." + enc.name;
    std::vector<std::pair<std::string, bool>> layers;
    std::vector<std::string> modules;
    auto add = [&](const std::string& layer, const std::string& mod, bool trainable) {
      layers.emplace_back(layer, trainable);
      modules.push_back(mod);
    };
    add(module + ".embed", module, !enc.frozen);
    for (int64_t i = 0; i < enc.num_layers; ++i) add(module + ".block." + std::to_string(i), module, !enc.frozen);
    add(module + ".norm", module, !enc.frozen);
    add("projector." + enc.name, "projector." + enc.name, !enc.projector.frozen);
    AddChain(spec, enc.name, false, layers, modules);
    any_encoder_needs_graph = any_encoder_needs_graph || spec.layers.back().needs_graph;
  }
  std::vector<std::pair<std::string, bool>> layers;
  layers.emplace_back("llm.embed", !model.llm.frozen);
  for (int64_t i = 0; i < model.llm.num_layers; ++i) {
    layers.emplace_back("llm.block." + std::to_string(i), !model.llm.frozen);
  }
  layers.emplace_back("llm.head", !model.llm.frozen);
  AddChain(spec, "llm", any_encoder_needs_graph, layers, std::vector<std::string>(layers.size(), "llm"));
  return spec;
}

}  // namespace cornstarch
