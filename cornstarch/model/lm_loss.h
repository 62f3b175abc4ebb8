// The language-model loss fused with the head's matrix product. Only the labelled positions have a loss, so only
// their logits are computed; those are made a chunk of rows at a time, and each chunk's gradients (softmax minus
// the one-hot target, times the head matrix and times the inputs) are computed in the forward while its logits are
// at hand, as Liger-Kernel's fused linear cross-entropy does. At most one chunk of logits exists at a time (the
// unfused path keeps B x S x vocab logits, their log-softmax and its gradient: three 0.5 GB tensors at W1's
// 4 x 1024 x 32000), the backward only scales the stored gradients, and no work is spent on unlabelled positions.
// The reference beside it is MultimodalModel::TokenLossSum over the full logits.
#pragma once

#include <torch/types.h>

namespace cornstarch {

// Sum over rows of cross_entropy(hidden @ weight^T, labels): hidden [M, d], weight [vocab, d], labels [M] (every one
// a class index). Differentiable in hidden and weight (computing only the gradients that are needed), in fp32 with
// logits made `chunk_rows` rows at a time.
torch::Tensor LinearCrossEntropySum(const torch::Tensor& hidden, const torch::Tensor& weight,
                                    const torch::Tensor& labels, int64_t chunk_rows = 512);

}  // namespace cornstarch
