// Tensor parallelism (Megatron-LM's layout) inside the LLM: the tp ranks of a stage hold slices of each decoder
// block's weights and of the vocabulary, and the hidden state between blocks is whole on every tp rank.
//   attention   q, k, v split by heads (column-parallel), o split by its input (row-parallel)
//   SwiGLU      gate, up split by the intermediate width (column), down by its input (row)
//   vocabulary  the embedding's rows and the head's rows split into tp equal ranges
// A column-parallel layer's input passes through TpCopy (identity forward; backward sums the input gradients the
// ranks computed from their slices), a row-parallel layer's partial output through TpReduce (forward sums the
// partial outputs; backward passes the gradient on, as every rank needs all of it). So each block costs two
// all-reduces forward and two backward, and everything else (norms, residuals, RoPE tables, the encoders and
// projectors, which stay replicated) runs unchanged and identically on every tp rank.
//
// The shards are cut from the weights a single process would initialise (MultimodalModel shards after it
// initialises each layer), so every layout starts from the same model and reproduces the single-process run.
#pragma once

#include <torch/types.h>

#include <cstdint>

namespace cornstarch {

class Communicator;

// Which slice of a tensor-parallel layer this process holds.
struct TpShard {
  int rank = 0;
  int size = 1;
  bool active() const { return size > 1; }
  // [begin, begin + n / size): this rank's range of n rows (n divisible by size, checked by the config).
  int64_t Begin(int64_t n) const { return n / size * rank; }
  int64_t Length(int64_t n) const { return n / size; }
};

// How a parameter is laid over the tp ranks: whole on every rank, or cut along dim 0 or dim 1.
enum class TpSplit { kReplicated, kDim0, kDim1 };

// Identity forward; the backward sums the gradient over `tp`. Before a column-parallel layer.
torch::Tensor TpCopy(const torch::Tensor& x, Communicator* tp);
// Sum over `tp` forward; identity backward. After a row-parallel layer (and the vocabulary-parallel embedding).
torch::Tensor TpReduce(const torch::Tensor& x, Communicator* tp);

// Seconds this process has spent in TpCopy's and TpReduce's sums so far (benchmarks read it).
double TpCommSeconds();

// This rank's slice of a whole tensor laid out as `split`, and the whole tensor from every rank's slice (a
// collective over `tp`; used for checkpoints and exports).
torch::Tensor TpSlice(const torch::Tensor& whole, TpSplit split, const TpShard& shard);
torch::Tensor TpGather(const torch::Tensor& slice, TpSplit split, Communicator& tp);

}  // namespace cornstarch
