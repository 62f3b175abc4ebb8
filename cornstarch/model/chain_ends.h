// The layers at the ends of each chain: the embeddings that turn raw inputs into hidden states, and the norms,
// projectors and head that turn hidden states into what the next chain (or the loss) consumes.
#pragma once

#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <vector>

#include "cornstarch/plan/config.h"
#include "cornstarch/model/layer.h"
#include "cornstarch/model/transformer.h"

namespace cornstarch {

// An encoder's embedding layer, built from its kind's recipe (plan/encoder_kind.h): the input convolutions, the
// result as a sequence of tokens, the class token in front, positions, the LayerNorm. SigLIP/CLIP patch embeddings
// and Whisper's convolution stem are both this layer.
// x: [n, <input_shape>] -> [n, EncoderSequence, hidden].
// In a packed tower (dynamic_resolution or anyres; encoder `chain` of the batch): x holds packed patch rows
// [R, T, C * P * P], the patch convolution is applied as the product with its weight, and each view gets the
// position table resized to its grid (or none under rope_2d): [R, T, hidden].
class EncoderEmbed : public Layer {
 public:
  EncoderEmbed(const EncoderConfig& cfg, int chain);
  torch::Tensor Forward(const torch::Tensor& x, ForwardContext& ctx) override;

 private:
  // The position table [G * G, hidden] resized to each image of the batch's grids, placed at its patches.
  torch::Tensor DynamicPositions(const ModalityInput& m, int64_t rows, int64_t length) const;

  int chain_;
  bool packed_;
  int64_t table_side_ = 0;  // packed: the position table's grid side (image_size / patch_size)
  std::vector<torch::nn::AnyModule> convs_;
  std::vector<bool> gelu_;                   // after convs_[i]
  torch::Tensor position_;                   // a parameter or, for fixed positions, a buffer
  torch::Tensor class_token_;                // undefined: none
  torch::nn::LayerNorm pre_norm_{nullptr};  // null: none
};

// What the tower hands its projector: the tokens beyond EncoderTokens dropped (CLIP's class token, in front; LLaVA's
// "default" feature selection), then
// the final LayerNorm when post_norm is set.
class EncoderOutput : public Layer {
 public:
  explicit EncoderOutput(const EncoderConfig& cfg);
  torch::Tensor Forward(const torch::Tensor& x, ForwardContext& ctx) override;

 private:
  bool drop_class_token_;
  int64_t tokens_;
  torch::nn::LayerNorm norm_{nullptr};
};

// Encoder width -> LLM width: Linear, or Linear-GELU-Linear (LLaVA-1.5's mlp2x_gelu). Sharded with its tower
// (model.encoders.<name>.tp): the MLP's fc1 column-parallel and fc2 row-parallel; the lone Linear row-parallel, each
// rank reading its range of the (whole) input features. Either way the output is whole on every tp rank.
class Projector : public Layer {
 public:
  Projector(const EncoderConfig& cfg, int64_t llm_hidden);
  torch::Tensor Forward(const torch::Tensor& x, ForwardContext& ctx) override;
  void ShardTp(const TpShard& shard) override;
  TpSplit SplitOf(const std::string& name) const override;

 private:
  bool shardable_;              // model.encoders.<name>.tp
  TpShard shard_;               // inactive: whole
  torch::nn::Linear fc1_{nullptr}, fc2_{nullptr};
};

// Token embedding with the encoders' features written over their placeholder positions. Ignores `x`; reads
// ctx.batch->input_ids and ctx.features (one per encoder, matching batch->modalities). Vocabulary-parallel under
// tensor parallelism: a rank holds a range of the rows, looks up the ids inside it (zeros elsewhere), and the
// ranks' lookups are summed (under sequence parallelism each rank keeps its piece of the sum, the encoders'
// features written into the placeholders that fall in it).
class TokenEmbed : public Layer {
 public:
  explicit TokenEmbed(const LlmConfig& cfg);
  torch::Tensor Forward(const torch::Tensor& x, ForwardContext& ctx) override;
  void ShardTp(const TpShard& shard) override;
  TpSplit SplitOf(const std::string&) const override { return TpSplit::kDim0; }

 private:
  torch::nn::Embedding embed_{nullptr};
  int64_t vocab_begin_ = 0;  // the first row this rank holds
  bool sequence_parallel_ = false;  // hands on only this rank's piece of the sequence
};

// Final RMSNorm and the vocabulary projection: [B, S, hidden] -> logits [B, S, vocab]. Under tensor parallelism
// a rank holds a range of the vocabulary's rows and the loss is vocabulary-parallel (model/lm_loss.h).
class LmHead : public Layer {
 public:
  explicit LmHead(const LlmConfig& cfg);
  // Logits [B, S, vocab]: whole rows, so not under tensor parallelism (the loss never needs them).
  torch::Tensor Forward(const torch::Tensor& x, ForwardContext& ctx) override;
  // The summed cross-entropy of Forward(x) at the positions with labels != -100, computing only their logits
  // (model/lm_loss.h). Collective over `tp` when it has several ranks.
  torch::Tensor LossSum(const torch::Tensor& x, const torch::Tensor& labels, Communicator* tp);
  void ShardTp(const TpShard& shard) override;
  TpSplit SplitOf(const std::string& name) const override {
    return name == "out.weight" ? TpSplit::kDim0 : TpSplit::kReplicated;
  }

 private:
  RMSNorm norm_{nullptr};
  torch::nn::Linear out_{nullptr};
  int64_t vocab_begin_ = 0;
  bool sharded_ = false;
  bool sequence_parallel_ = false;  // x is this rank's piece of the sequence
};

}  // namespace cornstarch
