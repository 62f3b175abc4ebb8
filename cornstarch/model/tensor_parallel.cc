#include "cornstarch/model/tensor_parallel.h"

#include <torch/torch.h>

#include <chrono>

#include "cornstarch/base/check.h"
#include "cornstarch/dist/communicator.h"

namespace cornstarch {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

double comm_seconds = 0;  // TpCommSeconds; the tp collectives run on the training thread only

// Runs `collective` and adds its time to comm_seconds.
template <typename F>
torch::Tensor Timed(F&& collective) {
  const auto start = std::chrono::steady_clock::now();
  torch::Tensor out = collective();
  comm_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

torch::Tensor SumOver(const torch::Tensor& x, Communicator& tp) {
  return Timed([&] {
    torch::Tensor sum = x.contiguous().clone();
    tp.AllReduce(sum, ReduceOp::kSum);
    return sum;
  });
}

Communicator* CommOf(AutogradContext* ctx) { return reinterpret_cast<Communicator*>(ctx->saved_data["tp"].toInt()); }

class CopyFunction : public torch::autograd::Function<CopyFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t tp) {
    ctx->saved_data["tp"] = tp;
    return x;  // autograd gives the output a node of its own over the same storage
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    // The tp ranks run the same graph: a gradient is missing on all of them alike, and then nothing is summed.
    if (!grads[0].defined()) return {torch::Tensor(), torch::Tensor()};
    return {SumOver(grads[0], *CommOf(ctx)), torch::Tensor()};
  }
};

class ReduceFunction : public torch::autograd::Function<ReduceFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t tp) {
    return SumOver(x, *reinterpret_cast<Communicator*>(tp));
  }
  static variable_list backward(AutogradContext*, variable_list grads) { return {grads[0], torch::Tensor()}; }
};

// [B, L, ...] on every rank -> [B, s, ...]: the pieces in rank order (TpGather along dim 1), the padding cut off.
torch::Tensor GatherSeq(const torch::Tensor& piece, int64_t s, Communicator& tp) {
  return Timed([&] { return TpGather(piece, TpSplit::kDim1, tp).narrow(1, 0, s).contiguous(); });
}

// [B, s, ...] partial sums -> this rank's [B, L, ...] piece of their sum, the sequence padded with zero rows.
torch::Tensor ReduceScatterSeq(const torch::Tensor& x, Communicator& tp) {
  return Timed([&] {
    const int64_t s = x.size(1), piece = SpLength(s, tp.size());
    // The collective splits along dim 0: the sequence travels in front.
    torch::Tensor rows = x.transpose(0, 1).contiguous();
    if (piece * tp.size() > s) {
      std::vector<int64_t> pad = rows.sizes().vec();
      pad[0] = piece * tp.size() - s;
      rows = torch::cat({rows, torch::zeros(pad, rows.options())});
    }
    std::vector<int64_t> shape = rows.sizes().vec();
    shape[0] = piece;
    torch::Tensor mine = torch::empty(shape, rows.options());
    tp.ReduceScatter(rows, mine, ReduceOp::kSum);
    return mine.transpose(0, 1).contiguous();
  });
}

class SpGatherFunction : public torch::autograd::Function<SpGatherFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& piece, int64_t s, int64_t tp) {
    ctx->saved_data["tp"] = tp;
    return GatherSeq(piece, s, *reinterpret_cast<Communicator*>(tp));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    if (!grads[0].defined()) return {torch::Tensor(), torch::Tensor(), torch::Tensor()};
    return {ReduceScatterSeq(grads[0], *CommOf(ctx)), torch::Tensor(), torch::Tensor()};
  }
};

class SpReduceScatterFunction : public torch::autograd::Function<SpReduceScatterFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t tp) {
    ctx->saved_data["tp"] = tp;
    ctx->saved_data["s"] = x.size(1);
    return ReduceScatterSeq(x, *reinterpret_cast<Communicator*>(tp));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    if (!grads[0].defined()) return {torch::Tensor(), torch::Tensor()};
    return {GatherSeq(grads[0], ctx->saved_data["s"].toInt(), *CommOf(ctx)), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor TpCopy(const torch::Tensor& x, Communicator* tp) {
  if (tp == nullptr || tp->size() == 1) return x;
  return CopyFunction::apply(x, reinterpret_cast<int64_t>(tp));
}

torch::Tensor TpReduce(const torch::Tensor& x, Communicator* tp) {
  if (tp == nullptr || tp->size() == 1) return x;
  return ReduceFunction::apply(x, reinterpret_cast<int64_t>(tp));
}

int64_t SpLength(int64_t s, int tp) { return (s + tp - 1) / tp; }

torch::Tensor SpGather(const torch::Tensor& piece, int64_t s, Communicator* tp) {
  if (tp == nullptr || tp->size() == 1) return piece;
  return SpGatherFunction::apply(piece, s, reinterpret_cast<int64_t>(tp));
}

torch::Tensor SpReduceScatter(const torch::Tensor& x, Communicator* tp) {
  if (tp == nullptr || tp->size() == 1) return x;
  return SpReduceScatterFunction::apply(x, reinterpret_cast<int64_t>(tp));
}

torch::Tensor TpRegionIn(const torch::Tensor& x, int64_t s, Communicator* tp, const TpShard& shard) {
  return shard.sequence_parallel ? SpGather(x, s, tp) : TpCopy(x, tp);
}

torch::Tensor TpRegionOut(const torch::Tensor& x, Communicator* tp, const TpShard& shard) {
  return shard.sequence_parallel ? SpReduceScatter(x, tp) : TpReduce(x, tp);
}

torch::Tensor TpRowLinear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                          Communicator* tp) {
  if (tp == nullptr || tp->size() == 1) return torch::nn::functional::linear(x, weight, bias);
  const torch::Tensor sum = TpReduce(torch::nn::functional::linear(x, weight), tp);
  return bias.defined() ? sum + bias : sum;
}

double TpCommSeconds() { return comm_seconds; }

torch::Tensor TpSlice(const torch::Tensor& whole, TpSplit split, const TpShard& shard) {
  if (split == TpSplit::kReplicated || !shard.active()) return whole;
  if (split == TpSplit::kQkv) {
    std::vector<torch::Tensor> mine;
    for (const torch::Tensor& block : whole.chunk(3)) mine.push_back(TpSlice(block, TpSplit::kDim0, shard));
    return torch::cat(mine);
  }
  const int64_t dim = split == TpSplit::kDim0 ? 0 : 1;
  const int64_t n = whole.size(dim);
  CS_CHECK(n % shard.size == 0, "dim ", dim, " of ", whole.sizes(), " does not split over ", shard.size, " tp ranks");
  return whole.narrow(dim, shard.Begin(n), shard.Length(n));
}

torch::Tensor TpJoin(const std::vector<torch::Tensor>& slices, TpSplit split) {
  if (split == TpSplit::kReplicated) return slices.at(0);
  if (split != TpSplit::kQkv) return torch::cat(slices, split == TpSplit::kDim1 ? 1 : 0);
  std::vector<torch::Tensor> blocks;  // q, k, v: each the ranks' pieces of it in rank order
  for (int64_t b = 0; b < 3; ++b) {
    std::vector<torch::Tensor> pieces;
    for (const torch::Tensor& slice : slices) pieces.push_back(slice.chunk(3).at(static_cast<size_t>(b)));
    blocks.push_back(torch::cat(pieces));
  }
  return torch::cat(blocks);
}

torch::Tensor TpGather(const torch::Tensor& slice, TpSplit split, Communicator& tp) {
  if (split == TpSplit::kReplicated || tp.size() == 1) return slice;
  // The collective concatenates flat buffers: every rank's slice, in rank order, then joined as `split` says.
  const torch::Tensor flat = slice.contiguous().view({-1});
  torch::Tensor all = torch::empty({flat.numel() * tp.size()}, flat.options());
  tp.AllGather(flat, all);
  std::vector<torch::Tensor> slices;
  for (const torch::Tensor& piece : all.chunk(tp.size())) slices.push_back(piece.view(slice.sizes()));
  return TpJoin(slices, split);
}

std::vector<int64_t> TpWholeSizes(c10::IntArrayRef slice_sizes, TpSplit split, int tp) {
  std::vector<int64_t> whole = slice_sizes.vec();
  if (split != TpSplit::kReplicated) whole[split == TpSplit::kDim1 ? 1 : 0] *= tp;
  return whole;
}

}  // namespace cornstarch
