// The model as the planner sees it: a flat, ordered list of named layers grouped into chains (one per encoder, in
// config order, then the LLM last), with freezing resolved per layer. Pure: no tensors. The LibTorch model builds
// its layers in exactly this order, and the pipeline partitioner places these layers on stages.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cornstarch/plan/config.h"
#include "cornstarch/plan/encoder_kind.h"

namespace cornstarch {

struct LayerSpec {
  std::string name;    // "encoder.vision.block.3", "projector.vision", "llm.block.7"
  std::string module;  // unit of freezing: "encoder.vision", "projector.vision" or "llm"
  int chain = 0;       // index into ModelSpec::chains
  bool trainable = false;
  // Something trainable lies at or before this layer in the encoder->LLM DAG, so the layer must record an
  // autograd graph (and, in a pipeline, run a backward). False: forward under no-grad, no backward at all.
  bool needs_graph = false;
  // Activation checkpointing (model.activation_checkpointing) applies: a transformer block with a graph, which
  // reads nothing with a gradient but its input, keeps only that input and runs its forward again in backward.
  bool recompute = false;
};

struct ChainSpec {
  std::string name;  // encoder name, or "llm"
  int begin = 0;     // [begin, end) into ModelSpec::layers
  int end = 0;
};

struct ModelSpec {
  std::vector<ChainSpec> chains;  // encoders in config order, then the LLM
  std::vector<LayerSpec> layers;  // chain after chain

  int llm_chain() const { return static_cast<int>(chains.size()) - 1; }
};

// Layers per encoder: embed, block.0..n-1 (n = EncoderBlocks), norm, then the projector; LLM: embed, block.0..n-1, head.
ModelSpec BuildModelSpec(const ModelConfig& model);

// Blocks built and run: num_layers up to feature_layer (the later ones' output is never used).
int64_t EncoderBlocks(const EncoderConfig& encoder);

}  // namespace cornstarch
