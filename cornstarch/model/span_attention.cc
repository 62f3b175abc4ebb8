#include "cornstarch/model/span_attention.h"

#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <vector>

#include "cornstarch/model/bitfield_attention.h"
#include "cornstarch/plan/attention_spans.h"

namespace cornstarch {

namespace {

// Attention within each segment of packed rows (cu_seqlens boundaries): q [T, H, D], k and v [T, Hkv, D] -> [T, H, D].
torch::Tensor VarlenDense(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                          const std::vector<int64_t>& cu_seqlens, bool causal) {
  const int64_t group = q.size(1) / k.size(1);
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(2)));
  std::vector<torch::Tensor> outs;
  for (size_t s = 0; s + 1 < cu_seqlens.size(); ++s) {
    const int64_t begin = cu_seqlens[s], length = cu_seqlens[s + 1] - begin;
    const torch::Tensor qs = q.narrow(0, begin, length).transpose(0, 1);  // [H, L, D]
    const torch::Tensor ks = k.narrow(0, begin, length).transpose(0, 1).repeat_interleave(group, 0);
    const torch::Tensor vs = v.narrow(0, begin, length).transpose(0, 1).repeat_interleave(group, 0);
    torch::Tensor scores = torch::matmul(qs, ks.transpose(1, 2)) * scale;
    if (causal) {
      const torch::Tensor later = torch::ones({length, length}, torch::kBool).triu(1).to(scores.device());
      scores = scores.masked_fill(later, -std::numeric_limits<float>::infinity());
    }
    outs.push_back(torch::matmul(torch::softmax(scores, -1), vs).transpose(0, 1));
  }
  return torch::cat(outs, 0);
}

torch::Tensor Indices(const std::vector<int64_t>& values, const torch::Device& device) {
  return torch::tensor(values, torch::kLong).to(device);
}

}  // namespace

torch::Tensor SpanAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                            const torch::Tensor& words) {
  const int64_t B = q.size(0), H = q.size(1), S = q.size(2), D = q.size(3), Hkv = k.size(1);
  const torch::Tensor w = words.to(torch::kCPU).contiguous();
  const std::optional<AttentionSpans> spans = DecomposeMask(w.data_ptr<int64_t>(), B, S);
  if (!spans) return BitfieldAttention(q, k, v, words);
  // Rows of the whole batch, token-major: [B * S, heads, D].
  const torch::Tensor qf = q.permute({0, 2, 1, 3}).reshape({B * S, H, D});
  const torch::Tensor kf = k.permute({0, 2, 1, 3}).reshape({B * S, Hkv, D});
  const torch::Tensor vf = v.permute({0, 2, 1, 3}).reshape({B * S, Hkv, D});
  std::vector<torch::Tensor> outputs, destinations;
  for (const auto& [pass, causal] : {std::pair{&spans->causal, true}, std::pair{&spans->bidirectional, false}}) {
    if (pass->rows.empty()) continue;
    const torch::Tensor rows = Indices(pass->rows, q.device()), owned = Indices(pass->owned, q.device());
    const torch::Tensor o =
        VarlenDense(qf.index_select(0, rows), kf.index_select(0, rows), vf.index_select(0, rows), pass->cu_seqlens,
                    causal);
    outputs.push_back(o.index_select(0, owned));
    destinations.push_back(rows.index_select(0, owned));
  }
  torch::Tensor out = torch::zeros({B * S, H, D}, q.options());
  if (!outputs.empty()) out = out.index_copy(0, torch::cat(destinations), torch::cat(outputs));
  return out.reshape({B, S, H, D}).permute({0, 2, 1, 3});
}

}  // namespace cornstarch
