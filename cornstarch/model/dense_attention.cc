#include "cornstarch/model/dense_attention.h"

#include <torch/torch.h>

#include <cmath>

#include "cornstarch/plan/bitfield_mask.h"
#include "cornstarch/base/check.h"

namespace cornstarch {

torch::Tensor DenseMaskFromWords(const torch::Tensor& words) {
  CS_CHECK(words.dim() == 2 && words.scalar_type() == torch::kLong, "words must be [B, S] int64");
  const int64_t s = words.size(1);
  const torch::Tensor wi = words.unsqueeze(2);  // [B, S, 1] queries
  const torch::Tensor wj = words.unsqueeze(1);  // [B, 1, S] keys
  const torch::Tensor idx = torch::arange(s, words.options());
  const torch::Tensor causal = idx.unsqueeze(1) >= idx.unsqueeze(0);  // j <= i
  const torch::Tensor text = wi.bitwise_and(kTextBit).ne(0);
  const torch::Tensor shared = wi.bitwise_and(wj).bitwise_and(kGroupMask).ne(0);
  const torch::Tensor gi = wi.bitwise_and(kGroupMask);
  const torch::Tensor same_group = gi.ne(0).logical_and(gi.eq(wj.bitwise_and(kGroupMask)))
                                       .logical_and(wj.bitwise_and(kTextBit).eq(0));
  const torch::Tensor allowed =
      torch::where(text, causal.unsqueeze(0).logical_and(shared), same_group);
  return allowed.unsqueeze(1);
}

torch::Tensor DenseAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const torch::Tensor& mask) {
  const int64_t heads = q.size(1), kv_heads = k.size(1);
  CS_CHECK(heads % kv_heads == 0, "query heads ", heads, " not a multiple of kv heads ", kv_heads);
  torch::Tensor keys = k, values = v;
  if (kv_heads != heads) {
    keys = k.repeat_interleave(heads / kv_heads, 1);
    values = v.repeat_interleave(heads / kv_heads, 1);
  }
  torch::Tensor scores = torch::matmul(q, keys.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(-1)));
  if (!mask.defined()) return torch::matmul(torch::softmax(scores, -1), values);
  // A finite fill keeps fully masked rows finite; multiplying by the mask then zeroes them exactly.
  scores = scores.masked_fill(mask.logical_not(), -1e30);
  const torch::Tensor probs = torch::softmax(scores, -1) * mask.to(scores.scalar_type());
  return torch::matmul(probs, values);
}

}  // namespace cornstarch
