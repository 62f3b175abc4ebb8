// Attention under the bitfield mask on CPU, flash-style: queries and keys in tiles, tiles with nothing allowed
// skipped entirely (TileMask), partially allowed tiles masked per element, full tiles unmasked; an online
// softmax in fp32 over chunks of allowed key tiles, so memory is O(tile x chunk) per thread, never N x N.
// Backward recomputes the probabilities from the saved log-sum-exp, by key tile for dK and dV, with dQ in the same
// pass when each thread has whole (sample, kv head) pairs to itself, else in a pass of its own by query tile (no
// write conflicts between threads either way). Parallel over (batch, head, tile) with LibTorch's intra-op threads.
// Grouped-query attention: query head h reads kv head h / (H / Hkv). The kernel computes in a layout with the
// query heads of one kv head interleaved token by token, so they share each key GEMM as one taller product, and
// runs of allowed tiles are plain views of the rows: per GEMM a handful of LibTorch ops, no gathers.
// Rows with nothing allowed (padding) produce exact zeros and zero gradients.
#pragma once

#include <torch/types.h>

#include <tuple>

namespace cornstarch {

struct BitfieldAttentionOptions {
  int64_t tile_q = 64;
  int64_t tile_k = 64;
  int64_t chunk = 1024;  // at most this many keys (forward, dQ) or queries (dK/dV) in one GEMM
  // Per sample, a flag per query tile: compute only the flagged query rows (a context-parallel rank's share of
  // the sequence); the other rows' outputs and gradients stay zero. Empty: every row.
  std::vector<std::vector<uint8_t>> query_tiles;
};

struct BitfieldAttentionStats {
  int64_t tiles_total = 0;     // (batch, head, query tile, key tile) combinations
  int64_t tiles_computed = 0;  // of which had something allowed and were computed
  int64_t tiles_full = 0;      // of which needed no per-element mask
  int64_t allowed_pairs = 0;   // (batch, head, i, j) pairs allowed: the useful work
  int64_t pairs_computed = 0;  // (batch, head, i, j) scores computed, allowed or not: the work done
};

// q [B, H, S, D] float; k, v [B, Hkv, S, D]; words [B, S] int64. Returns (out [B, H, S, D], lse [B, H, S]);
// lse is -inf on rows with nothing allowed.
std::tuple<torch::Tensor, torch::Tensor> BitfieldAttentionForward(const torch::Tensor& q, const torch::Tensor& k,
                                                                  const torch::Tensor& v, const torch::Tensor& words,
                                                                  const BitfieldAttentionOptions& options = {},
                                                                  BitfieldAttentionStats* stats = nullptr);

// Gradients (dq, dk, dv) of the forward above for upstream gradient `dout`.
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> BitfieldAttentionBackward(
    const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& words,
    const torch::Tensor& out, const torch::Tensor& lse, const torch::Tensor& dout,
    const BitfieldAttentionOptions& options = {});

// The autograd-enabled attention the model uses: differentiable in q, k and v.
torch::Tensor BitfieldAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                const torch::Tensor& words);

}  // namespace cornstarch
