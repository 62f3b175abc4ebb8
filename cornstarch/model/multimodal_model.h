// The multimodal LLM: its layers built in ModelSpec order, each from its own seed, so a layer's initial weights do
// not depend on which other layers a process builds. Frozen layers' parameters have requires_grad = false, and
// layers with nothing trainable at or before them run under no-grad (no autograd graph at all). Under tensor
// parallelism each layer is initialised whole and then keeps this rank's slice (model/tensor_parallel.h), so the
// slices are those of the single-process model.
#pragma once

#include <torch/types.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cornstarch/plan/config.h"
#include "cornstarch/data/batch.h"
#include "cornstarch/model/layer.h"
#include "cornstarch/plan/model_spec.h"

namespace cornstarch {

class MultimodalModel {
 public:
  MultimodalModel(const ModelConfig& config, uint64_t seed);
  // Builds only `layers` (indices into spec().layers): a pipeline stage's share of the model; `tp`: the slice of
  // the tensor-parallel layers this rank holds.
  MultimodalModel(const ModelConfig& config, uint64_t seed, const std::vector<int>& layers, const TpShard& tp = {});

  // Moves the built layers' parameters and buffers to `device` (parameters keep their identity and requires_grad).
  void To(const c10::Device& device);

  const ModelSpec& spec() const { return spec_; }
  const ModelConfig& config() const { return config_; }
  bool has_layer(int index) const { return layers_.at(index) != nullptr; }

  // The per-microbatch tables every LLM layer reads (RoPE).
  ForwardContext MakeContext(const Batch& batch) const;

  // Runs layer `index` on x, under no-grad when spec().layers[index].needs_graph is false.
  torch::Tensor RunLayer(int index, const torch::Tensor& x, ForwardContext& ctx);

  // Layers [begin, end) of chain `chain` on x, in order. An encoder chain on a microbatch without any instance of
  // its modality runs nothing and yields "no features" ([0, LLM width]), whichever of its layers these are.
  torch::Tensor RunLayers(int chain, int begin, int end, torch::Tensor x, const Batch& batch, ForwardContext& ctx);

  // The sizes of what RunLayers returns when it ends at layer `index` (not the head) for `batch`: what one pipeline
  // stage hands the next. Derived from the config and the batch, which both sides of a stage boundary hold, so no
  // message has to carry them.
  std::vector<int64_t> OutputSizes(int index, const Batch& batch) const;

  // Every encoder chain, then the LLM: logits [B, S, vocab]. REQUIRES: every layer built.
  torch::Tensor Logits(const Batch& batch);

  // Sum of the token cross-entropies over labelled positions (labels != -100).
  static torch::Tensor TokenLossSum(const torch::Tensor& logits, const torch::Tensor& labels);

  // TokenLossSum(head(x), batch.labels) from the LM head's input x, computing only the labelled positions' logits,
  // a chunk at a time (LmHead::LossSum): what training and evaluation use. REQUIRES: the head is built.
  // Collective over `tp` when the model is sharded.
  torch::Tensor HeadLossSum(const torch::Tensor& x, const Batch& batch, Communicator* tp = nullptr);

  // ("encoder.vision.block.0.qkv.weight", tensor) for every parameter of the built layers, in layer order.
  std::vector<std::pair<std::string, torch::Tensor>> NamedParameters() const { return Named(false); }
  std::vector<torch::Tensor> TrainableParameters() const;
  // How each of NamedParameters() lies over the tp ranks (all kReplicated without tensor parallelism).
  std::vector<TpSplit> ParameterSplits() const;
  const TpShard& tp() const { return tp_; }
  // ("encoder.audio.embed.position", tensor) for every buffer (derived, never trained) of the built layers.
  std::vector<std::pair<std::string, torch::Tensor>> NamedBuffers() const { return Named(true); }

 private:
  std::vector<std::pair<std::string, torch::Tensor>> Named(bool buffers) const;

  ModelConfig config_;
  ModelSpec spec_;
  TpShard tp_;
  std::vector<std::shared_ptr<Layer>> layers_;
};

}  // namespace cornstarch
