// The span path of bitfield attention (plan/attention_spans.h): one causal pass over the documents and one
// bidirectional pass over the modality groups, each a variable-length attention over rows gathered from the
// batch, then every row's output taken from the one pass that owns it. This file runs each segment as dense
// float math on any device: the reference the GPU's variable-length fused attention is tested against, and a
// proof (tests/attention/span_attention_test.cc) that the decomposition equals the bitfield kernel, outputs and
// gradients.
#pragma once

#include <torch/types.h>

namespace cornstarch {

// q [B, H, S, D]; k, v [B, Hkv, S, D] with H a multiple of Hkv; words [B, S] int64. Differentiable in q, k and v;
// rows whose words allow nothing get zeros. Words that DecomposeMask does not accept run the general kernel
// (BitfieldAttention) instead, never a wrong answer.
torch::Tensor SpanAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                            const torch::Tensor& words);

}  // namespace cornstarch
