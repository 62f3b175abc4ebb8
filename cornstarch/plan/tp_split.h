// How a parameter lies over the ranks of a tensor-parallel group: a planning fact (which layers split, and along
// which dimension), shared by the model that cuts the slices and the checkpoint names that record them.
#pragma once

namespace cornstarch {

// Whole on every rank, cut along dim 0 or dim 1, or (kQkv) a fused q/k/v projection: dim 0 holds three blocks of
// equal height, each cut along dim 0, so that a rank keeps the same heads of q, k and v.
enum class TpSplit { kReplicated, kDim0, kDim1, kQkv };

}  // namespace cornstarch
