// Tensor parallelism (Megatron-LM's layout): the tp ranks of a stage hold slices of each block's weights and of
// the vocabulary, and the hidden state between blocks is whole on every tp rank.
//   attention   q, k, v split by heads (column-parallel; an encoder's fused qkv as TpSplit::kQkv), the output
//               projection split by its input (row-parallel)
//   MLP         gate, up (an encoder's fc1) split by the intermediate width (column), down (fc2) by its input (row)
//   vocabulary  the embedding's rows and the head's rows split into tp equal ranges
//   projector   the MLP's fc1 column- and fc2 row-parallel; a lone Linear row-parallel
// Encoder towers and their projectors are split only when model.encoders.<name>.tp is set; otherwise they run
// whole on every tp rank. A column-parallel layer's input passes through TpCopy (identity forward; backward sums the
// input gradients the ranks computed from their slices), a row-parallel layer's partial output through TpReduce
// (forward sums the partial outputs; backward passes the gradient on, as every rank needs all of it). So each block
// costs two all-reduces forward and two backward, and everything else (norms, residuals, RoPE tables, the encoders'
// embeddings) runs unchanged and identically on every tp rank.
//
// Sequence parallelism (parallel.sequence_parallel, Megatron-LM's): outside the tp regions (norms, residual adds,
// the messages between pipeline stages) each tp rank holds only its piece of the sequence, rows
// [rank * L, (rank + 1) * L) of dim 1 with L = SpLength(S, tp) (the sequence padded with zero rows to tp * L; they
// stay zero through norms and residual adds and are cut off again inside the regions). A region is entered by
// SpGather (all-gather forward, reduce-scatter backward) and left by SpReduceScatter (reduce-scatter forward,
// all-gather backward): the same bytes as the two all-reduces, and 1/tp of the activation memory in between. A
// norm's weight then sees only this rank's rows, so its gradient is summed over tp (RMSNorm::ForwardPiece).
//
// The shards are cut from the weights a single process would initialise (MultimodalModel shards after it
// initialises each layer), so every layout starts from the same model and reproduces the single-process run.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "cornstarch/plan/tp_split.h"

namespace cornstarch {

class Communicator;

// Which slice of a tensor-parallel layer this process holds.
struct TpShard {
  int rank = 0;
  int size = 1;
  bool sequence_parallel = false;  // the LLM's residual stream cut along the sequence (only with size > 1)
  bool active() const { return size > 1; }
  // [begin, begin + n / size): this rank's range of n rows (n divisible by size, checked by the config).
  int64_t Begin(int64_t n) const { return n / size * rank; }
  int64_t Length(int64_t n) const { return n / size; }
};

// Identity forward; the backward sums the gradient over `tp`. Before a column-parallel layer.
torch::Tensor TpCopy(const torch::Tensor& x, Communicator* tp);
// Sum over `tp` forward; identity backward. After a row-parallel layer (and the vocabulary-parallel embedding).
torch::Tensor TpReduce(const torch::Tensor& x, Communicator* tp);

// Sequence parallelism: this rank's share L of a sequence of `s` rows.
int64_t SpLength(int64_t s, int tp);
// [B, L, ...] pieces -> the whole [B, s, ...] on every rank; the backward sums each rank's gradient of the whole and
// keeps this rank's piece. Before a column-parallel layer.
torch::Tensor SpGather(const torch::Tensor& piece, int64_t s, Communicator* tp);
// [B, S, ...] partial sums -> this rank's piece of their sum over `tp`; the backward gathers the whole gradient.
// After a row-parallel layer (and the vocabulary-parallel embedding).
torch::Tensor SpReduceScatter(const torch::Tensor& x, Communicator* tp);

// Into a tp region of a sequence of `s` rows (`shard` says whether the residual stream is sequence-parallel):
// TpCopy or SpGather; and out of it: TpReduce or SpReduceScatter.
torch::Tensor TpRegionIn(const torch::Tensor& x, int64_t s, Communicator* tp, const TpShard& shard);
torch::Tensor TpRegionOut(const torch::Tensor& x, Communicator* tp, const TpShard& shard);

// A row-parallel linear layer: x @ weight^T summed over `tp` (TpReduce), then the bias, which every rank holds
// whole and so adds once, after the sum. Without tp ranks: F::linear(x, weight, bias).
torch::Tensor TpRowLinear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                          Communicator* tp);

// Seconds this process has spent in the tp collectives so far (benchmarks read it).
double TpCommSeconds();

// This rank's slice of a whole tensor laid out as `split`, and the whole tensor from every rank's slice (a
// collective over `tp`; used for checkpoints and exports).
torch::Tensor TpSlice(const torch::Tensor& whole, TpSplit split, const TpShard& shard);
torch::Tensor TpGather(const torch::Tensor& slice, TpSplit split, Communicator& tp);
// The whole tensor from every rank's slice, in rank order (the inverse of TpSlice; TpGather without the collective).
torch::Tensor TpJoin(const std::vector<torch::Tensor>& slices, TpSplit split);
// The sizes of the whole tensor a slice of `slice_sizes` is cut from.
std::vector<int64_t> TpWholeSizes(c10::IntArrayRef slice_sizes, TpSplit split, int tp);

}  // namespace cornstarch
