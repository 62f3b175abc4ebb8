// Transformer building blocks shared by the encoders and the LLM.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include "cornstarch/plan/config.h"
#include "cornstarch/model/layer.h"

namespace cornstarch {

// RMSNorm in fp32: x * rsqrt(mean(x^2) + eps) * weight.
class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t dim, double eps);
  torch::Tensor forward(const torch::Tensor& x);
  // Sequence parallelism: `x` is this rank's piece of a sequence whose other pieces the other ranks of `tp` hold.
  // The same result; the weight's gradient, which each rank computes from its piece only, is summed over `tp`.
  torch::Tensor ForwardPiece(const torch::Tensor& x, Communicator* tp);

 private:
  torch::Tensor Apply(const torch::Tensor& x, const torch::Tensor& weight) const;
  torch::Tensor weight_;
  double eps_;
};
TORCH_MODULE(RMSNorm);

// RoPE tables (HF "rotate half" convention) for positions [B, S]: cos and sin, each [B, S, head_dim].
std::pair<torch::Tensor, torch::Tensor> RopeTables(const torch::Tensor& positions, int64_t head_dim, double theta);

// 2-D RoPE tables for the packed patch rows of a dynamic-resolution input (data/batch.h's grid and patches):
// cos and sin [rows, length, head_dim], the patch row over the first half of the rotary frequencies and the column
// over the second (Qwen2-VL's vision rotary embedding); padding takes position (0, 0).
std::pair<torch::Tensor, torch::Tensor> Rope2dTables(const torch::Tensor& grid, const torch::Tensor& patches,
                                                     int64_t rows, int64_t length, int64_t head_dim, double theta);

// Pre-norm ViT/CLIP/Whisper-encoder block: x + MHA(LN(x)), then x + MLP(LN(x)) with the configured GELU (exact,
// tanh-approximated or CLIP's quick_gelu); full attention within each instance (one image or one audio clip).
// In a packed tower (dynamic_resolution or anyres; encoder `chain` of the batch) the views are packed into rows and
// attention follows the rows' bitfield words (one group per view), with the 2-D RoPE tables of the context under
// rope_2d.
// Under tensor parallelism (model.encoders.<name>.tp) it is split as the decoder block is: the fused qkv by heads,
// fc1 by the MLP width (column-parallel), out and fc2 by their inputs (row-parallel, biases added after the sum);
// the hidden state between blocks stays whole on every tp rank.
class EncoderBlock : public Layer {
 public:
  EncoderBlock(const EncoderConfig& cfg, int chain);
  torch::Tensor Forward(const torch::Tensor& x, ForwardContext& ctx) override;
  void ShardTp(const TpShard& shard) override;
  TpSplit SplitOf(const std::string& name) const override;

 private:
  int64_t heads_, head_dim_;  // this rank's heads
  int chain_;
  bool packed_;
  bool shardable_;            // model.encoders.<name>.tp
  bool sharded_ = false;
  Activation act_;  // model.encoders.<name>.hidden_act
  torch::nn::LayerNorm norm1_{nullptr}, norm2_{nullptr};
  torch::nn::Linear qkv_{nullptr}, out_{nullptr}, fc1_{nullptr}, fc2_{nullptr};
};

// Llama/Qwen2 decoder block: x + GQA(RMSNorm(x)) with RoPE under the bitfield mask (the tiled bitfield kernel, no
// N x N mask), then x + SwiGLU(RMSNorm(x)). Under tensor parallelism it holds heads/tp query and kv heads and
// intermediate/tp of the SwiGLU width, and under sequence parallelism its input and output are this rank's piece of
// the sequence (model/tensor_parallel.h).
class DecoderBlock : public Layer {
 public:
  explicit DecoderBlock(const LlmConfig& cfg);
  torch::Tensor Forward(const torch::Tensor& x, ForwardContext& ctx) override;
  void ShardTp(const TpShard& shard) override;
  TpSplit SplitOf(const std::string& name) const override;

 private:
  int64_t heads_, kv_heads_, head_dim_;  // this rank's heads
  TpShard shard_;  // whether the residual stream is this rank's piece of the sequence (sequence parallelism)
  RMSNorm attn_norm_{nullptr}, mlp_norm_{nullptr};
  torch::nn::Linear q_{nullptr}, k_{nullptr}, v_{nullptr}, o_{nullptr};
  torch::nn::Linear gate_{nullptr}, up_{nullptr}, down_{nullptr};
};

}  // namespace cornstarch
