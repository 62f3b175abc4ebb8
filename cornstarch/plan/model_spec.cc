#include "cornstarch/plan/model_spec.h"

#include "cornstarch/base/check.h"

namespace cornstarch {

int64_t EncoderBlocks(const EncoderConfig& encoder) { return encoder.num_layers + encoder.feature_layer + 1; }

namespace {

// Appends `layers` (name, module, trainable set) as one chain, resolving chain index and needs_graph.
void AddChain(ModelSpec& spec, const std::string& name, bool upstream_needs_graph, std::vector<LayerSpec> layers) {
  const int begin = static_cast<int>(spec.layers.size());
  bool needs_graph = upstream_needs_graph;
  for (LayerSpec& l : layers) {
    l.chain = static_cast<int>(spec.chains.size());
    l.needs_graph = needs_graph = needs_graph || l.trainable;
    l.recompute = l.recompute && l.needs_graph;
    spec.layers.push_back(std::move(l));
  }
  spec.chains.push_back({name, begin, static_cast<int>(spec.layers.size())});
}

// The embed, block.0..n-1 layers of `module`, then `tail`; the blocks are recomputed when `recompute` (and they
// record a graph).
std::vector<LayerSpec> ModuleLayers(const std::string& module, int64_t blocks, bool trainable, bool recompute,
                                    const std::vector<std::string>& tail) {
  std::vector<LayerSpec> layers = {{module + ".embed", module, 0, trainable, false}};
  for (int64_t i = 0; i < blocks; ++i) {
    layers.push_back({module + ".block." + std::to_string(i), module, 0, trainable, false, recompute});
  }
  for (const std::string& t : tail) layers.push_back({module + "." + t, module, 0, trainable, false});
  return layers;
}

}  // namespace

ModelSpec BuildModelSpec(const ModelConfig& model) {
  ModelSpec spec;
  bool any_encoder_needs_graph = false;
  for (const EncoderConfig& enc : model.encoders) {
    std::vector<LayerSpec> layers = ModuleLayers("encoder." + enc.name, EncoderBlocks(enc), !enc.frozen,
                                                   model.activation_checkpointing, {"norm"});
    layers.push_back({"projector." + enc.name, "projector." + enc.name, 0, !enc.projector.frozen, false});
    AddChain(spec, enc.name, false, std::move(layers));
    any_encoder_needs_graph = any_encoder_needs_graph || spec.layers.back().needs_graph;
  }
  AddChain(spec, "llm", any_encoder_needs_graph, ModuleLayers("llm", model.llm.num_layers, !model.llm.frozen,
                                                      model.activation_checkpointing, {"head"}));
  return spec;
}

}  // namespace cornstarch
