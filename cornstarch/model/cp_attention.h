// Context-parallel bitfield attention. The sequence is cut into blocks (whole kernel tiles); the CP balancer
// (plan/cp_balancer.h) gives each rank of the cp group the same number of blocks, and a rank holds the
// activations of its blocks' tokens only, in sequence order. Attention needs keys from anywhere in the sequence:
// K and V are all-gathered over the cp group and put back at their original positions, and the kernel computes
// this rank's query tiles only, still skipping empty tiles. All-gather rather than a ring, as the reference
// chose: under a multimodal mask a rank's queries need keys from everywhere, and gathering once computes every
// allowed pair exactly once with no per-round bookkeeping; K and V travel together in one all-gather. Backward:
// each rank computes dQ for its rows and dK, dV for every key its queries saw; one reduce-scatter sums dK and dV
// over the group and leaves each rank its own rows. Kept for backward: the gathered K and V, and this rank's rows
// only of the queries, output and log-sum-exp.
#pragma once

#include <torch/types.h>

#include "cornstarch/data/cp_layout.h"

namespace cornstarch {

class Communicator;

// q_local [B, H, S/cp, D], k_local and v_local [B, Hkv, S/cp, D]: this rank's tokens; words [B, S]: the whole
// sequence's mask words. Returns this rank's attention output [B, H, S/cp, D], differentiable in q, k and v.
// Collective over `cp` (rank order = position in layout.tokens), forward and backward.
torch::Tensor CpBitfieldAttention(const torch::Tensor& q_local, const torch::Tensor& k_local,
                                  const torch::Tensor& v_local, const torch::Tensor& words, const CpLayout& layout,
                                  Communicator& cp);

}  // namespace cornstarch
