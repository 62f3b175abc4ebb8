#include "cornstarch/model/chain_ends.h"

#include <torch/torch.h>

#include <cmath>
#include <map>

#include "cornstarch/dist/communicator.h"
#include "cornstarch/model/lm_loss.h"
#include "cornstarch/plan/model_spec.h"
#include "cornstarch/base/check.h"

namespace cornstarch {

namespace F = torch::nn::functional;

namespace {

// Whisper's positions: sin over the first half of the channels, cos over the second, [tokens, width].
torch::Tensor Sinusoids(int64_t tokens, int64_t width) {
  const int64_t half = width / 2;
  const double log_increment = std::log(10000.0) / std::max<int64_t>(1, half - 1);
  const torch::Tensor inv = torch::exp(-log_increment * torch::arange(half, torch::kDouble));
  const torch::Tensor t = torch::arange(tokens, torch::kDouble).unsqueeze(1) * inv.unsqueeze(0);
  torch::Tensor pos = torch::cat({t.sin(), t.cos()}, 1).to(torch::kFloat);
  if (pos.size(1) < width) pos = F::pad(pos, F::PadFuncOptions({0, width - pos.size(1)}));
  return pos;
}

}  // namespace

EncoderEmbed::EncoderEmbed(const EncoderConfig& cfg, int chain) : chain_(chain), packed_(PackedTower(cfg)) {
  const EmbeddingRecipe r = KindOf(cfg.type).embedding(cfg);
  const int64_t d = cfg.hidden_size;
  for (const EmbeddingRecipe::Conv& c : r.convs) {
    if (c.dims == 2) {
      convs_.emplace_back(register_module(c.name, torch::nn::Conv2d(torch::nn::Conv2dOptions(c.in, c.out, c.kernel)
                                                                        .stride(c.stride)
                                                                        .padding(c.padding)
                                                                        .bias(c.bias))));
    } else {
      CS_CHECK(c.dims == 1, "convolution ", c.name, " over ", c.dims, " dims");
      convs_.emplace_back(register_module(c.name, torch::nn::Conv1d(torch::nn::Conv1dOptions(c.in, c.out, c.kernel)
                                                                        .stride(c.stride)
                                                                        .padding(c.padding)
                                                                        .bias(c.bias))));
    }
    gelu_.push_back(c.gelu);
  }
  if (packed_) table_side_ = cfg.image_size / cfg.patch_size;
  if (r.positions == EmbeddingRecipe::Positions::kSinusoidal) {
    position_ = register_buffer("position", Sinusoids(EncoderSequence(cfg), d));
  } else if (r.positions == EmbeddingRecipe::Positions::kLearned) {
    const int64_t rows = packed_ ? table_side_ * table_side_ : EncoderSequence(cfg);
    position_ = register_parameter("position", torch::zeros({rows, d}));
  }
  if (r.class_token) class_token_ = register_parameter("class_token", torch::zeros({d}));
  if (r.pre_norm) {
    pre_norm_ = register_module("pre_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d}).eps(cfg.layer_norm_eps)));
  }
}

torch::Tensor EncoderEmbed::DynamicPositions(const ModalityInput& m, int64_t rows, int64_t length) const {
  const int64_t d = position_.size(1);
  const torch::Tensor square = position_.view({1, table_side_, table_side_, d}).permute({0, 3, 1, 2});
  const torch::Tensor grid = m.grid.cpu();
  std::map<std::pair<int64_t, int64_t>, torch::Tensor> resized;  // images of one size share their table
  std::vector<torch::Tensor> per_image;
  for (int64_t i = 0; i < grid.size(0); ++i) {
    const std::pair<int64_t, int64_t> g{grid[i][0].item<int64_t>(), grid[i][1].item<int64_t>()};
    torch::Tensor& t = resized[g];
    if (!t.defined()) {
      t = F::interpolate(square, F::InterpolateFuncOptions()
                                     .size(std::vector<int64_t>{g.first, g.second})
                                     .mode(torch::kBicubic)
                                     .align_corners(false))
              .permute({0, 2, 3, 1})
              .reshape({g.first * g.second, d});
    }
    per_image.push_back(t);
  }
  return torch::zeros({rows * length, d}, position_.options())
      .index_copy(0, m.patches, torch::cat(per_image))
      .view({rows, length, d});
}

torch::Tensor EncoderEmbed::Forward(const torch::Tensor& x, ForwardContext& ctx) {
  if (packed_) {
    const ModalityInput& m = ctx.batch->modalities.at(chain_);
    const torch::Tensor& w = convs_[0].get<torch::nn::Conv2d>()->weight;
    const torch::Tensor& b = convs_[0].get<torch::nn::Conv2d>()->bias;
    torch::Tensor h = F::linear(x, w.reshape({w.size(0), -1}), b);
    // The residual stream stays fp32 under autocast, as the fp32 positions make it elsewhere (and LibTorch's CPU
    // LayerNorm takes no bf16 input with fp32 weights).
    h = position_.defined() ? h + DynamicPositions(m, x.size(0), x.size(1)) : h.to(torch::kFloat);
    return pre_norm_ ? pre_norm_(h) : h;
  }
  torch::Tensor h = x;
  for (size_t i = 0; i < convs_.size(); ++i) {
    h = convs_[i].forward(h);
    if (gelu_[i]) h = F::gelu(h);
  }
  h = h.flatten(2).transpose(1, 2);  // [n, hidden, positions...] -> [n, tokens, hidden]
  if (class_token_.defined()) h = torch::cat({class_token_.expand({h.size(0), 1, h.size(2)}), h}, 1);
  h = h + position_;
  return pre_norm_ ? pre_norm_(h) : h;
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

Projector::Projector(const EncoderConfig& cfg, int64_t llm_hidden) : shardable_(cfg.tp) {
  fc1_ = register_module("fc1", torch::nn::Linear(cfg.hidden_size, llm_hidden));
  if (cfg.projector.type == ProjectorType::kMlp) fc2_ = register_module("fc2", torch::nn::Linear(llm_hidden, llm_hidden));
}

TpSplit Projector::SplitOf(const std::string& name) const {
  if (!shardable_) return TpSplit::kReplicated;
  if (!fc2_) return name == "fc1.weight" ? TpSplit::kDim1 : TpSplit::kReplicated;
  if (name.rfind("fc1.", 0) == 0) return TpSplit::kDim0;
  return name == "fc2.weight" ? TpSplit::kDim1 : TpSplit::kReplicated;
}

void Projector::ShardTp(const TpShard& shard) {
  if (!shardable_) return;
  KeepSlices(shard);
  shard_ = shard;
}

torch::Tensor Projector::Forward(const torch::Tensor& x, ForwardContext& ctx) {
  Communicator* tp = shard_.active() ? ctx.tp_group : nullptr;
  if (!fc2_) {
    // Row-parallel: this rank's range of the input features. Each rank's input gradient is zero outside its range,
    // and the tower before it is whole on every rank, so TpCopy sums the ranges into the whole gradient.
    const int64_t width = fc1_->weight.size(1);
    const torch::Tensor mine = shard_.active() ? TpCopy(x, tp).narrow(-1, shard_.rank * width, width) : x;
    return TpRowLinear(mine, fc1_->weight, fc1_->bias, tp);
  }
  return TpRowLinear(F::gelu(fc1_(TpCopy(x, tp))), fc2_->weight, fc2_->bias, tp);
}

TokenEmbed::TokenEmbed(const LlmConfig& cfg) {
  embed_ = register_module("embed", torch::nn::Embedding(cfg.vocab_size, cfg.hidden_size));
}

void TokenEmbed::ShardTp(const TpShard& shard) {
  vocab_begin_ = shard.Begin(embed_->weight.size(0));
  KeepSlices(shard);
  sequence_parallel_ = shard.sequence_parallel;
}

torch::Tensor TokenEmbed::Forward(const torch::Tensor&, ForwardContext& ctx) {
  const Batch& batch = *ctx.batch;
  CS_CHECK(ctx.features.size() == batch.modalities.size(), ctx.features.size(), " feature sets for ",
           batch.modalities.size(), " modalities");
  torch::Tensor h;
  if (ctx.tp_group != nullptr && ctx.tp_group->size() > 1) {
    const torch::Tensor local = batch.input_ids - vocab_begin_;
    const torch::Tensor mine = local.ge(0).logical_and(local.lt(embed_->weight.size(0)));
    const torch::Tensor partial = embed_(local.clamp(0, embed_->weight.size(0) - 1)) * mine.unsqueeze(-1);
    h = sequence_parallel_ ? SpReduceScatter(partial, ctx.tp_group) : TpReduce(partial, ctx.tp_group);
  } else {
    h = embed_(batch.input_ids);
  }
  // Under sequence parallelism `h` holds rows [first, first + l) of each sequence of s: a placeholder at row t of
  // sequence i (flat position i * s + t) is at i * l + t - first here, if it is here at all.
  const int64_t b = h.size(0), s = batch.input_ids.size(1), l = h.size(1), d = h.size(2);
  const int64_t first = sequence_parallel_ ? ctx.tp_group->rank() * l : 0;
  torch::Tensor flat = h.reshape({b * l, d});
  for (size_t k = 0; k < ctx.features.size(); ++k) {
    torch::Tensor positions = batch.modalities[k].positions;
    if (positions.numel() == 0) continue;
    torch::Tensor features = ctx.features[k].reshape({-1, d}).to(flat.scalar_type());
    if (batch.modalities[k].patches.defined()) features = features.index_select(0, batch.modalities[k].patches);
    if (batch.modalities[k].rows.defined()) features = features.index_select(0, batch.modalities[k].rows);
    CS_CHECK(features.size(0) == positions.numel(), "encoder ", k, " produced ", features.size(0),
             " tokens for ", positions.numel(), " placeholders");
    if (sequence_parallel_) {
      // Every tp rank ran the encoders alike; each writes only its placeholders, so the features' gradient is
      // the sum of the ranks' (TpCopy).
      const torch::Tensor t = positions.remainder(s) - first;
      const torch::Tensor here = t.ge(0).logical_and(t.lt(l)).nonzero().squeeze(1);
      features = TpCopy(features, ctx.tp_group).index_select(0, here);
      positions = (positions.div(s, "floor") * l + t).index_select(0, here);
    }
    flat = flat.index_copy(0, positions, features);
  }
  return flat.view({b, l, d});
}

LmHead::LmHead(const LlmConfig& cfg) {
  norm_ = register_module("norm", RMSNorm(cfg.hidden_size, cfg.rms_norm_eps));
  out_ = register_module("out", torch::nn::Linear(torch::nn::LinearOptions(cfg.hidden_size, cfg.vocab_size).bias(false)));
}

void LmHead::ShardTp(const TpShard& shard) {
  vocab_begin_ = shard.Begin(out_->weight.size(0));
  KeepSlices(shard);
  sharded_ = true;
  sequence_parallel_ = shard.sequence_parallel;
}

torch::Tensor LmHead::Forward(const torch::Tensor& x, ForwardContext&) {
  CS_CHECK(!sharded_, "whole logits are never made under tensor parallelism");
  return out_(norm_(x));
}

torch::Tensor LmHead::LossSum(const torch::Tensor& x, const torch::Tensor& labels, Communicator* tp) {
  CS_CHECK(!sharded_ || (tp != nullptr && tp->size() > 1), "a vocabulary slice without its tp group");
  const torch::Tensor flat = labels.reshape({-1});
  const torch::Tensor rows = flat.ne(-100).nonzero().squeeze(1);
  // RMSNorm is per row: normalising only the labelled rows is exact. Under sequence parallelism each rank
  // normalises its piece and the labelled rows are picked from the gathered sequence.
  const torch::Tensor h =
      sequence_parallel_
          ? SpGather(norm_->ForwardPiece(x, tp), labels.size(1), tp).reshape({-1, x.size(-1)}).index_select(0, rows)
          : TpCopy(norm_(x.reshape({-1, x.size(-1)}).index_select(0, rows)), tp);
  return LinearCrossEntropySum(h, out_->weight, flat.index_select(0, rows), 512, tp, vocab_begin_);
}

}  // namespace cornstarch
