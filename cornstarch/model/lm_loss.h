// The language-model loss fused with the head's matrix product. Only the labelled positions have a loss, so only
// their logits are computed; those are made a chunk of rows at a time, and each chunk's gradients (softmax minus
// the one-hot target, times the head matrix and times the inputs) are computed in the forward while its logits are
// at hand, as Liger-Kernel's fused linear cross-entropy does. At most one chunk of logits exists at a time (the
// unfused path keeps B x S x vocab logits, their log-softmax and its gradient: three 0.5 GB tensors at W1's
// 4 x 1024 x 32000), the backward only scales the stored gradients, and no work is spent on unlabelled positions.
// The reference beside it is MultimodalModel::TokenLossSum over the full logits.
#pragma once

#include <torch/types.h>

#include <cstdint>

namespace cornstarch {

class Communicator;

// Sum over rows of cross_entropy(hidden @ weight^T, labels): hidden [M, d], weight [vocab, d], labels [M] (every one
// a class index). Differentiable in hidden and weight (computing only the gradients that are needed), in fp32 with
// logits made `chunk_rows` rows at a time.
//
// Vocabulary-parallel (Megatron's cross-entropy) when `tp` has several ranks: `weight` is this rank's rows
// [vocab_begin, vocab_begin + weight.size(0)) of the head, and no rank ever holds more than its slice of any
// logits row. Per chunk, one all-reduce of the rows' maxima and one of their sums of exponentials with the target's
// logit (from the slice that holds it); every rank gets the same loss, and its gradient in hidden is this slice's
// part (the caller's TpCopy sums the parts in backward). Collective over `tp`.
torch::Tensor LinearCrossEntropySum(const torch::Tensor& hidden, const torch::Tensor& weight,
                                    const torch::Tensor& labels, int64_t chunk_rows = 512, Communicator* tp = nullptr,
                                    int64_t vocab_begin = 0);

}  // namespace cornstarch
