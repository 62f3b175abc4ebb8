// The layers at the ends of each chain: the embeddings that turn raw inputs into hidden states, and the norms,
// projectors and head that turn hidden states into what the next chain (or the loss) consumes.
#pragma once

#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include "cornstarch/plan/config.h"
#include "cornstarch/model/layer.h"
#include "cornstarch/model/transformer.h"

namespace cornstarch {

// ViT patch embedding: a conv with stride = patch size, plus learned position embeddings. SigLIP style: one
// position per patch. CLIP style: a learned class token in front of the patches (its own position), no conv
// bias, and CLIP's pre_layrnorm on the sum.
// x: [n, C, H, W] -> [n, EncoderSequence, hidden].
class VisionEmbed : public Layer {
 public:
  explicit VisionEmbed(const EncoderConfig& cfg);
  torch::Tensor Forward(const torch::Tensor& x, ForwardContext& ctx) override;

 private:
  torch::nn::Conv2d patch_{nullptr};
  torch::Tensor position_;
  torch::Tensor class_token_;                 // CLIP only
  torch::nn::LayerNorm pre_norm_{nullptr};   // CLIP only
};

// Whisper-encoder stem: conv(k3) + GELU, conv(k3, stride 2) + GELU, plus fixed sinusoidal positions.
// x: [n, mel_bins, frames] -> [n, frames / 2, hidden].
class AudioEmbed : public Layer {
 public:
  explicit AudioEmbed(const EncoderConfig& cfg);
  torch::Tensor Forward(const torch::Tensor& x, ForwardContext& ctx) override;

 private:
  torch::nn::Conv1d conv1_{nullptr}, conv2_{nullptr};
  torch::Tensor position_;  // buffer
};

// The embedding layer of `cfg`'s kind: the one LibTorch piece of an encoder kind (plan/encoder_kind.h has the
// rest). A new kind adds its layer above and one case in this factory.
std::shared_ptr<Layer> MakeEncoderEmbed(const EncoderConfig& cfg);

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

// Encoder width -> LLM width: Linear, or Linear-GELU-Linear (LLaVA-1.5's mlp2x_gelu).
class Projector : public Layer {
 public:
  Projector(const EncoderConfig& cfg, int64_t llm_hidden);
  torch::Tensor Forward(const torch::Tensor& x, ForwardContext& ctx) override;

 private:
  torch::nn::Linear fc1_{nullptr}, fc2_{nullptr};
};

// Token embedding with the encoders' features written over their placeholder positions. Ignores `x`; reads
// ctx.batch->input_ids and ctx.features (one per encoder, matching batch->modalities).
class TokenEmbed : public Layer {
 public:
  explicit TokenEmbed(const LlmConfig& cfg);
  torch::Tensor Forward(const torch::Tensor& x, ForwardContext& ctx) override;

 private:
  torch::nn::Embedding embed_{nullptr};
};

// Final RMSNorm and the vocabulary projection: [B, S, hidden] -> logits [B, S, vocab].
class LmHead : public Layer {
 public:
  explicit LmHead(const LlmConfig& cfg);
  torch::Tensor Forward(const torch::Tensor& x, ForwardContext& ctx) override;

 private:
  RMSNorm norm_{nullptr};
  torch::nn::Linear out_{nullptr};
};

}  // namespace cornstarch
