#include "cornstarch/model/transformer.h"

#include <torch/torch.h>

#include "cornstarch/model/bitfield_attention.h"
#include "cornstarch/model/dense_attention.h"
#include "cornstarch/model/cp_attention.h"
#include "cornstarch/model/tensor_parallel.h"

namespace cornstarch {

namespace F = torch::nn::functional;

RMSNormImpl::RMSNormImpl(int64_t dim, double eps) : eps_(eps) {
  weight_ = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) { return Apply(x, weight_); }

torch::Tensor RMSNormImpl::ForwardPiece(const torch::Tensor& x, Communicator* tp) {
  return Apply(x, TpCopy(weight_, tp));
}

torch::Tensor RMSNormImpl::Apply(const torch::Tensor& x, const torch::Tensor& weight) const {
  const torch::Tensor xf = x.to(torch::kFloat);
  const torch::Tensor normed = xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps_);
  return normed.to(x.scalar_type()) * weight;
}

std::pair<torch::Tensor, torch::Tensor> RopeTables(const torch::Tensor& positions, int64_t head_dim, double theta) {
  const torch::Tensor exponents =
      torch::arange(0, head_dim, 2, positions.options().dtype(torch::kDouble)) / static_cast<double>(head_dim);
  const torch::Tensor inv_freq = torch::pow(theta, exponents).reciprocal().to(torch::kFloat);
  const torch::Tensor angles = positions.to(torch::kFloat).unsqueeze(-1) * inv_freq;  // [B, S, head_dim / 2]
  const torch::Tensor emb = torch::cat({angles, angles}, -1);
  return {emb.cos(), emb.sin()};
}

std::pair<torch::Tensor, torch::Tensor> Rope2dTables(const torch::Tensor& grid, const torch::Tensor& patches,
                                                     int64_t rows, int64_t length, int64_t head_dim, double theta) {
  const torch::Tensor g = grid.cpu();
  std::vector<torch::Tensor> row, col;
  for (int64_t i = 0; i < g.size(0); ++i) {
    const int64_t r = g[i][0].item<int64_t>(), c = g[i][1].item<int64_t>();
    row.push_back(torch::arange(r, torch::kLong).repeat_interleave(c));
    col.push_back(torch::arange(c, torch::kLong).repeat({r}));
  }
  const auto place = [&](const std::vector<torch::Tensor>& at) {
    torch::Tensor flat = torch::zeros({rows * length}, torch::kLong);
    if (!at.empty()) flat.index_copy_(0, patches.cpu(), torch::cat(at));
    return flat.view({rows, length});
  };
  // Each axis takes head_dim / 4 frequencies; "rotate half" pairs channel i with i + head_dim / 2.
  const auto [row_cos, row_sin] = RopeTables(place(row), head_dim / 2, theta);
  const auto [col_cos, col_sin] = RopeTables(place(col), head_dim / 2, theta);
  const int64_t q = head_dim / 4;
  const auto join = [&](const torch::Tensor& a, const torch::Tensor& b) {
    const torch::Tensor half = torch::cat({a.slice(-1, 0, q), b.slice(-1, 0, q)}, -1);
    return torch::cat({half, half}, -1).to(patches.device());
  };
  return {join(row_cos, col_cos), join(row_sin, col_sin)};
}

namespace {

// x [B, H, S, D]; cos/sin [B, S, D].
torch::Tensor ApplyRope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  const torch::Tensor rotated = torch::cat({-x.slice(-1, half), x.slice(-1, 0, half)}, -1);
  return x * cos.unsqueeze(1) + rotated * sin.unsqueeze(1);
}

}  // namespace

EncoderBlock::EncoderBlock(const EncoderConfig& cfg, int chain)
    : heads_(cfg.num_heads),
      head_dim_(cfg.hidden_size / cfg.num_heads),
      chain_(chain),
      packed_(PackedTower(cfg)),
      shardable_(cfg.tp),
      act_(cfg.hidden_act) {
  const int64_t d = cfg.hidden_size;
  norm1_ = register_module("norm1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d}).eps(cfg.layer_norm_eps)));
  qkv_ = register_module("qkv", torch::nn::Linear(d, 3 * d));
  out_ = register_module("out", torch::nn::Linear(d, d));
  norm2_ = register_module("norm2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d}).eps(cfg.layer_norm_eps)));
  fc1_ = register_module("fc1", torch::nn::Linear(d, cfg.intermediate_size));
  fc2_ = register_module("fc2", torch::nn::Linear(cfg.intermediate_size, d));
}

TpSplit EncoderBlock::SplitOf(const std::string& name) const {
  if (!shardable_) return TpSplit::kReplicated;
  if (name.rfind("qkv.", 0) == 0) return TpSplit::kQkv;
  if (name.rfind("fc1.", 0) == 0) return TpSplit::kDim0;
  if (name == "out.weight" || name == "fc2.weight") return TpSplit::kDim1;
  return TpSplit::kReplicated;
}

void EncoderBlock::ShardTp(const TpShard& shard) {
  if (!shardable_) return;
  KeepSlices(shard);
  heads_ /= shard.size;
  sharded_ = true;
}

torch::Tensor EncoderBlock::Forward(const torch::Tensor& x, ForwardContext& ctx) {
  Communicator* tp = sharded_ ? ctx.tp_group : nullptr;  // a whole tower's blocks sum nothing over tp
  const int64_t n = x.size(0), t = x.size(1), inner = heads_ * head_dim_;
  const auto qkv = qkv_(TpCopy(norm1_(x), tp)).view({n, t, 3, heads_, head_dim_}).permute({2, 0, 3, 1, 4}).unbind(0);
  torch::Tensor attn;
  if (packed_) {
    const auto& [cos, sin] = ctx.encoder_rope.at(chain_);
    const bool rope = cos.defined();
    attn = BitfieldAttention(rope ? ApplyRope(qkv[0], cos, sin) : qkv[0], rope ? ApplyRope(qkv[1], cos, sin) : qkv[1],
                             qkv[2], ctx.batch->modalities.at(chain_).words);
  } else {
    attn = DenseAttention(qkv[0], qkv[1], qkv[2], torch::Tensor());
  }
  torch::Tensor h = x + TpRowLinear(attn.transpose(1, 2).reshape({n, t, inner}), out_->weight, out_->bias, tp);
  const torch::Tensor u = fc1_(TpCopy(norm2_(h), tp));
  const torch::Tensor a = act_ == Activation::kQuickGelu
                              ? u * torch::sigmoid(1.702 * u)
                              : F::gelu(u, F::GELUFuncOptions().approximate(act_ == Activation::kGelu ? "none" : "tanh"));
  return h + TpRowLinear(a, fc2_->weight, fc2_->bias, tp);
}

DecoderBlock::DecoderBlock(const LlmConfig& cfg)
    : heads_(cfg.num_heads), kv_heads_(cfg.num_kv_heads), head_dim_(cfg.hidden_size / cfg.num_heads) {
  const int64_t d = cfg.hidden_size;
  attn_norm_ = register_module("attn_norm", RMSNorm(d, cfg.rms_norm_eps));
  const bool bias = cfg.attention_bias;
  q_ = register_module("q", torch::nn::Linear(torch::nn::LinearOptions(d, heads_ * head_dim_).bias(bias)));
  k_ = register_module("k", torch::nn::Linear(torch::nn::LinearOptions(d, kv_heads_ * head_dim_).bias(bias)));
  v_ = register_module("v", torch::nn::Linear(torch::nn::LinearOptions(d, kv_heads_ * head_dim_).bias(bias)));
  o_ = register_module("o", torch::nn::Linear(torch::nn::LinearOptions(heads_ * head_dim_, d).bias(false)));
  mlp_norm_ = register_module("mlp_norm", RMSNorm(d, cfg.rms_norm_eps));
  const int64_t ff = cfg.intermediate_size;
  gate_ = register_module("gate", torch::nn::Linear(torch::nn::LinearOptions(d, ff).bias(false)));
  up_ = register_module("up", torch::nn::Linear(torch::nn::LinearOptions(d, ff).bias(false)));
  down_ = register_module("down", torch::nn::Linear(torch::nn::LinearOptions(ff, d).bias(false)));
}

TpSplit DecoderBlock::SplitOf(const std::string& name) const {
  for (const char* column : {"q.", "k.", "v.", "gate.", "up."}) {
    if (name.rfind(column, 0) == 0) return TpSplit::kDim0;  // weight and bias rows: output features
  }
  if (name == "o.weight" || name == "down.weight") return TpSplit::kDim1;  // input features
  return TpSplit::kReplicated;
}

void DecoderBlock::ShardTp(const TpShard& shard) {
  KeepSlices(shard);
  heads_ /= shard.size;
  kv_heads_ /= shard.size;
  shard_ = shard;
}

torch::Tensor DecoderBlock::Forward(const torch::Tensor& x, ForwardContext& ctx) {
  // The attention and the MLP see the whole sequence, also where the residual stream `x` is only a piece of it.
  const int64_t b = x.size(0), s = shard_.sequence_parallel ? ctx.batch->input_ids.size(1) : x.size(1);
  auto norm = [&](RMSNorm& n, const torch::Tensor& t) {
    return shard_.sequence_parallel ? n->ForwardPiece(t, ctx.tp_group) : n(t);
  };
  const torch::Tensor h = TpRegionIn(norm(attn_norm_, x), s, ctx.tp_group, shard_);
  const torch::Tensor q = ApplyRope(q_(h).view({b, s, heads_, head_dim_}).transpose(1, 2), ctx.rope_cos, ctx.rope_sin);
  const torch::Tensor k =
      ApplyRope(k_(h).view({b, s, kv_heads_, head_dim_}).transpose(1, 2), ctx.rope_cos, ctx.rope_sin);
  const torch::Tensor v = v_(h).view({b, s, kv_heads_, head_dim_}).transpose(1, 2);
  const torch::Tensor attn = ctx.batch->cp.cp > 1
                                 ? CpBitfieldAttention(q, k, v, ctx.batch->mask_words, ctx.batch->cp, *ctx.cp_group)
                                 : BitfieldAttention(q, k, v, ctx.batch->mask_words);
  const torch::Tensor y =
      x + TpRegionOut(o_(attn.transpose(1, 2).reshape({b, s, heads_ * head_dim_})), ctx.tp_group, shard_);
  const torch::Tensor m = TpRegionIn(norm(mlp_norm_, y), s, ctx.tp_group, shard_);
  return y + TpRegionOut(down_(F::silu(gate_(m)) * up_(m)), ctx.tp_group, shard_);
}

}  // namespace cornstarch
