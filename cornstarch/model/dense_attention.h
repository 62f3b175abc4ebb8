// Attention with an explicitly materialised N x N mask built from bitfield words: the plain reference for the
// tiled bitfield kernel, and what the model uses until that kernel is in place.
#pragma once

#include <torch/types.h>

namespace cornstarch {

// [B, S] words -> [B, 1, S, S] bool, true where query i may attend key j (MaskAllows).
torch::Tensor DenseMaskFromWords(const torch::Tensor& words);

// q [B, H, S, D]; k, v [B, Hkv, S, D] with H a multiple of Hkv (grouped-query attention); mask [B, 1, S, S] bool
// or undefined for full attention. Rows with nothing allowed produce exact zeros (padding), never NaN.
torch::Tensor DenseAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const torch::Tensor& mask);

}  // namespace cornstarch
