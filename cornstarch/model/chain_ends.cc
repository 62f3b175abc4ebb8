#include "cornstarch/model/chain_ends.h"

#include <torch/torch.h>

#include <cmath>

#include "cornstarch/plan/model_spec.h"
#include "cornstarch/base/check.h"

namespace cornstarch {

namespace F = torch::nn::functional;

VisionEmbed::VisionEmbed(const EncoderConfig& cfg) {
  const bool clip = cfg.vision_style == VisionStyle::kClip;
  const int64_t d = cfg.hidden_size;
  patch_ = register_module(
      "patch", torch::nn::Conv2d(
                   torch::nn::Conv2dOptions(cfg.num_channels, d, cfg.patch_size).stride(cfg.patch_size).bias(!clip)));
  position_ = register_parameter("position", torch::zeros({EncoderSequence(cfg), d}));
  if (clip) {
    class_token_ = register_parameter("class_token", torch::zeros({d}));
    pre_norm_ = register_module("pre_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d}).eps(cfg.layer_norm_eps)));
  }
}

torch::Tensor VisionEmbed::Forward(const torch::Tensor& x, ForwardContext&) {
  torch::Tensor h = patch_(x).flatten(2).transpose(1, 2);
  if (!class_token_.defined()) return h + position_;
  h = torch::cat({class_token_.expand({h.size(0), 1, h.size(2)}), h}, 1) + position_;
  return pre_norm_(h);
}

AudioEmbed::AudioEmbed(const EncoderConfig& cfg) {
  const int64_t d = cfg.hidden_size;
  conv1_ = register_module("conv1", torch::nn::Conv1d(torch::nn::Conv1dOptions(cfg.num_mel_bins, d, 3).padding(1)));
  conv2_ = register_module("conv2", torch::nn::Conv1d(torch::nn::Conv1dOptions(d, d, 3).stride(2).padding(1)));
  // Whisper's sinusoids: sin over the first half of the channels, cos over the second.
  const int64_t frames = cfg.num_frames / 2, half = d / 2;
  const double log_increment = std::log(10000.0) / std::max<int64_t>(1, half - 1);
  const torch::Tensor inv = torch::exp(-log_increment * torch::arange(half, torch::kDouble));
  const torch::Tensor t = torch::arange(frames, torch::kDouble).unsqueeze(1) * inv.unsqueeze(0);
  torch::Tensor pos = torch::cat({t.sin(), t.cos()}, 1).to(torch::kFloat);
  if (pos.size(1) < d) pos = F::pad(pos, F::PadFuncOptions({0, d - pos.size(1)}));
  position_ = register_buffer("position", pos);
}

torch::Tensor AudioEmbed::Forward(const torch::Tensor& x, ForwardContext&) {
  const torch::Tensor h = F::gelu(conv2_(F::gelu(conv1_(x))));
  return h.transpose(1, 2) + position_;
}

std::shared_ptr<Layer> MakeEncoderEmbed(const EncoderConfig& cfg) {
  switch (cfg.type) {
    case EncoderType::kVision: return std::make_shared<VisionEmbed>(cfg);
    case EncoderType::kAudio: return std::make_shared<AudioEmbed>(cfg);
  }
  CS_CHECK(false, "no embedding layer for encoder type ", static_cast<int>(cfg.type));
  return nullptr;
}

EncoderOutput::EncoderOutput(const EncoderConfig& cfg)
    : drop_class_token_(EncoderSequence(cfg) > EncoderTokens(cfg)), tokens_(EncoderTokens(cfg)) {
  if (cfg.post_norm) {
    norm_ = register_module(
        "norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({cfg.hidden_size}).eps(cfg.layer_norm_eps)));
  }
}

torch::Tensor EncoderOutput::Forward(const torch::Tensor& x, ForwardContext&) {
  const torch::Tensor h = drop_class_token_ ? x.slice(1, x.size(1) - tokens_) : x;
  return norm_ ? norm_(h) : h;
}

Projector::Projector(const EncoderConfig& cfg, int64_t llm_hidden) {
  fc1_ = register_module("fc1", torch::nn::Linear(cfg.hidden_size, llm_hidden));
  if (cfg.projector.type == ProjectorType::kMlp) fc2_ = register_module("fc2", torch::nn::Linear(llm_hidden, llm_hidden));
}

torch::Tensor Projector::Forward(const torch::Tensor& x, ForwardContext&) {
  const torch::Tensor h = fc1_(x);
  return fc2_ ? fc2_(F::gelu(h)) : h;
}

TokenEmbed::TokenEmbed(const LlmConfig& cfg) {
  embed_ = register_module("embed", torch::nn::Embedding(cfg.vocab_size, cfg.hidden_size));
}

torch::Tensor TokenEmbed::Forward(const torch::Tensor&, ForwardContext& ctx) {
  const Batch& batch = *ctx.batch;
  CS_CHECK(ctx.features.size() == batch.modalities.size(), ctx.features.size(), " feature sets for ",
           batch.modalities.size(), " modalities");
  torch::Tensor h = embed_(batch.input_ids);
  const int64_t b = h.size(0), s = h.size(1), d = h.size(2);
  torch::Tensor flat = h.reshape({b * s, d});
  for (size_t k = 0; k < ctx.features.size(); ++k) {
    const torch::Tensor& positions = batch.modalities[k].positions;
    if (positions.numel() == 0) continue;
    torch::Tensor features = ctx.features[k].reshape({-1, d}).to(flat.scalar_type());
    if (batch.modalities[k].rows.defined()) features = features.index_select(0, batch.modalities[k].rows);
    CS_CHECK(features.size(0) == positions.numel(), "encoder ", k, " produced ", features.size(0),
             " tokens for ", positions.numel(), " placeholders");
    flat = flat.index_copy(0, positions, features);
  }
  return flat.view({b, s, d});
}

LmHead::LmHead(const LlmConfig& cfg) {
  norm_ = register_module("norm", RMSNorm(cfg.hidden_size, cfg.rms_norm_eps));
  out_ = register_module("out", torch::nn::Linear(torch::nn::LinearOptions(cfg.hidden_size, cfg.vocab_size).bias(false)));
}

torch::Tensor LmHead::Forward(const torch::Tensor& x, ForwardContext&) { return out_(norm_(x)); }

}  // namespace cornstarch
