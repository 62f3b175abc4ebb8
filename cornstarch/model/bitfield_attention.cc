#include "cornstarch/model/bitfield_attention.h"

#include <torch/torch.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

#include "cornstarch/plan/bitfield_mask.h"
#include "cornstarch/plan/tile_mask.h"
#include "cornstarch/base/check.h"
#include "cornstarch/device/autocast.h"
#include "cornstarch/device/cuda_stream.h"
#include "cornstarch/device/profile_scopes.h"
#include "kernels/bitfield_attention_cuda.h"

namespace cornstarch {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// A contiguous run of rows (or columns) taken from one tile: [begin, begin + length) of the sequence, stored at
// `offset` in the gathered chunk.
struct Segment {
  int64_t tile, begin, length, offset;
};

// Groups the listed tiles into chunks of at most `chunk` rows.
std::vector<std::vector<Segment>> Chunks(const std::vector<int32_t>& tiles, int64_t tile, int64_t n, int64_t chunk) {
  std::vector<std::vector<Segment>> chunks;
  int64_t used = chunk;
  for (int32_t t : tiles) {
    const int64_t begin = t * tile, length = std::min(tile, n - begin);
    if (used + length > chunk) {
      chunks.emplace_back();
      used = 0;
    }
    chunks.back().push_back({t, begin, length, used});
    used += length;
  }
  return chunks;
}

int64_t Rows(const std::vector<Segment>& segs) { return segs.back().offset + segs.back().length; }

// Rows of `m` ([n, D]) named by the segments, as one [rows, D] matrix (a view when they are contiguous).
torch::Tensor Gather(const torch::Tensor& m, const std::vector<Segment>& segs) {
  const int64_t first = segs.front().begin, rows = Rows(segs);
  if (segs.back().begin + segs.back().length - first == rows) return m.narrow(0, first, rows);
  std::vector<torch::Tensor> parts;
  for (const Segment& s : segs) parts.push_back(m.narrow(0, s.begin, s.length));
  return torch::cat(parts);
}

torch::Tensor Gather1d(const torch::Tensor& v, const std::vector<Segment>& segs) {
  return Gather(v.unsqueeze(1), segs).squeeze(1);
}

// Sets disallowed entries of the scores S [query rows, key cols] to -inf. Rows come from `row_segs` (query tiles),
// columns from `col_segs` (key tiles); only partial tile pairs need per-element checks.
void MaskScores(torch::Tensor& s, const std::vector<Segment>& row_segs, const std::vector<Segment>& col_segs,
                const int64_t* words, const TileMask& tiles) {
  float* data = s.data_ptr<float>();
  const int64_t ld = s.size(1);
  for (const Segment& r : row_segs) {
    for (const Segment& c : col_segs) {
      if (tiles.cls(r.tile, c.tile) == TileClass::kFull) continue;
      for (int64_t i = 0; i < r.length; ++i) {
        float* row = data + (r.offset + i) * ld + c.offset;
        const int64_t a = r.begin + i;
        for (int64_t j = 0; j < c.length; ++j) {
          if (!MaskAllows(words[a], words[c.begin + j], a, c.begin + j)) row[j] = kNegInf;
        }
      }
    }
  }
}

// exp(s - lse) in place, one lse per row. A -inf lse (nothing allowed) is clamped to the lowest float: such rows
// hold only -inf scores, and exp(-inf - lowest) = 0, so they vanish instead of becoming NaN.
void ProbabilitiesFromLse(torch::Tensor& s, const torch::Tensor& lse) {
  s.sub_(lse.clamp_min(std::numeric_limits<float>::lowest()).unsqueeze(1)).exp_();
}

std::vector<TileMask> PlanTiles(const torch::Tensor& words, const BitfieldAttentionOptions& o) {
  std::vector<TileMask> plans;
  const int64_t n = words.size(1);
  for (int64_t b = 0; b < words.size(0); ++b) {
    plans.emplace_back(words[b].data_ptr<int64_t>(), n, o.tile_q, o.tile_k);
  }
  return plans;
}

bool Selected(const BitfieldAttentionOptions& o, int64_t b, int64_t qt) {
  return o.query_tiles.empty() || o.query_tiles[b][qt] != 0;
}

// Runs fn(b, hk, qt, q0, rows) in parallel for every selected (batch, kv head, query tile) with something allowed;
// rows of the tile are [q0, q0 + rows). The query heads sharing kv head hk are processed together (GroupRows).
template <class Fn>
void ForEachQueryTile(int64_t batch, int64_t kv_heads, int64_t n, const std::vector<TileMask>& plans,
                      const BitfieldAttentionOptions& o, const Fn& fn) {
  const int64_t nq = (n + o.tile_q - 1) / o.tile_q;
  at::parallel_for(0, batch * kv_heads * nq, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / (kv_heads * nq), hk = (task / nq) % kv_heads, qt = task % nq;
      if (plans[b].keys_of(qt).empty() || !Selected(o, b, qt)) continue;
      const int64_t q0 = qt * o.tile_q;
      fn(b, hk, qt, q0, std::min(o.tile_q, n - q0));
    }
  });
}

// Rows [q0, q0 + rows) of the `group` query heads of kv head hk in sample b of x ([B, H, n, ...]), stacked into one
// matrix [group * rows, ...] (head-major): the grouped heads share every key chunk, so each GEMM is group times
// taller, and the mask applies to each head's rows alike (GroupSegments).
torch::Tensor GroupRows(const torch::Tensor& x, int64_t b, int64_t hk, int64_t group, int64_t q0, int64_t rows) {
  const torch::Tensor part = x[b].narrow(0, hk * group, group).narrow(1, q0, rows);
  return x.dim() == 4 ? part.reshape({group * rows, x.size(3)}) : part.reshape({group * rows});
}

// Writes `grouped` ([group * rows, ...], as GroupRows lays it out) back into x.
void UngroupRows(const torch::Tensor& x, const torch::Tensor& grouped, int64_t b, int64_t hk, int64_t group,
                 int64_t q0, int64_t rows) {
  torch::Tensor part = x[b].narrow(0, hk * group, group).narrow(1, q0, rows);
  part.copy_(grouped.view(part.sizes()));
}

// The row segments of query tile qt for GroupRows' layout: one per head.
std::vector<Segment> GroupSegments(int64_t qt, int64_t q0, int64_t rows, int64_t group) {
  std::vector<Segment> segs;
  for (int64_t g = 0; g < group; ++g) segs.push_back({qt, q0, rows, g * rows});
  return segs;
}

void CheckInputs(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& words,
                 const BitfieldAttentionOptions& o) {
  const int64_t nq = (q.size(2) + o.tile_q - 1) / o.tile_q;
  CS_CHECK(o.query_tiles.empty() || static_cast<int64_t>(o.query_tiles.size()) == q.size(0), "query_tiles for ",
           o.query_tiles.size(), " samples, batch of ", q.size(0));
  for (const auto& flags : o.query_tiles) CS_CHECK(static_cast<int64_t>(flags.size()) == nq, "query_tiles length");
  CS_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "q, k, v must be [B, H, S, D]");
  CS_CHECK(q.scalar_type() == torch::kFloat && k.scalar_type() == torch::kFloat && v.scalar_type() == torch::kFloat,
           "the bitfield kernels compute in fp32");
  CS_CHECK(k.sizes() == v.sizes() && q.size(0) == k.size(0) && q.size(2) == k.size(2) && q.size(3) == k.size(3),
           "q ", q.sizes(), " k ", k.sizes(), " v ", v.sizes());
  CS_CHECK(q.size(1) % k.size(1) == 0, "query heads ", q.size(1), " not a multiple of kv heads ", k.size(1));
  CS_CHECK(words.dim() == 2 && words.size(0) == q.size(0) && words.size(1) == q.size(2) &&
               words.scalar_type() == torch::kLong,
           "words must be [B, S] int64");
}

// CUDA tensors: the kernels under kernels/, launched under a guard of the tensors' device on LibTorch's current
// stream there (cornstarch/device/cuda_stream.h).
cuda::BitfieldAttentionParams CudaParams(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                         const torch::Tensor& words, const BitfieldAttentionOptions& o) {
  CS_CHECK(o.query_tiles.empty(), "the CUDA bitfield kernel computes every query row (no query_tiles)");
  CS_CHECK(k.is_cuda() && v.is_cuda() && words.is_cuda() && k.device() == q.device() && words.device() == q.device(),
           "q, k, v and words must be on one CUDA device");
  cuda::BitfieldAttentionParams p;
  p.q = q.data_ptr<float>();
  p.k = k.data_ptr<float>();
  p.v = v.data_ptr<float>();
  p.words = words.data_ptr<int64_t>();
  p.batch = q.size(0), p.heads = q.size(1), p.kv_heads = k.size(1), p.seq = q.size(2), p.dim = q.size(3);
  p.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(p.dim)));
  const std::string invalid = cuda::ValidateParams(p);
  CS_CHECK(invalid.empty(), "CUDA bitfield attention: ", invalid);
  return p;
}

void CheckLaunch(cudaError_t e, const char* what) {
  CS_CHECK(e == cudaSuccess, "CUDA bitfield attention ", what, ": ", cudaGetErrorString(e));
}

}  // namespace

std::tuple<torch::Tensor, torch::Tensor> BitfieldAttentionForward(const torch::Tensor& q_in, const torch::Tensor& k_in,
                                                                  const torch::Tensor& v_in,
                                                                  const torch::Tensor& words_in,
                                                                  const BitfieldAttentionOptions& o,
                                                                  BitfieldAttentionStats* stats) {
  const NoAutocastGuard fp32;  // the kernel's GEMMs stay fp32 on every thread
  RECORD_USER_SCOPE(scope::kAttention);
  CheckInputs(q_in, k_in, v_in, words_in, o);
  torch::NoGradGuard no_grad;
  const torch::Tensor q = q_in.contiguous(), k = k_in.contiguous(), v = v_in.contiguous();
  const torch::Tensor words = words_in.contiguous();
  if (q.is_cuda()) {
    cuda::BitfieldAttentionParams p = CudaParams(q, k, v, words, o);
    torch::Tensor out = torch::zeros_like(q), lse = torch::empty({p.batch, p.heads, p.seq}, q.options());
    p.out = out.data_ptr<float>();
    p.lse = lse.data_ptr<float>();
    const c10::DeviceGuard on_device(q.device());
    CheckLaunch(cuda::LaunchBitfieldAttentionForward(p, CurrentCudaStream(q.device())), "forward");
    return {out, lse};
  }
  const int64_t B = q.size(0), H = q.size(1), Hkv = k.size(1), n = q.size(2), D = q.size(3), group = H / Hkv;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  const std::vector<TileMask> plans = PlanTiles(words, o);
  torch::Tensor out = torch::zeros_like(q);
  torch::Tensor lse = torch::full({B, H, n}, kNegInf, q.options());
  std::atomic<int64_t> computed{0}, full{0};

  ForEachQueryTile(B, Hkv, n, plans, o, [&](int64_t b, int64_t hk, int64_t qt, int64_t q0, int64_t rows) {
    const TileMask& plan = plans[b];
    const std::vector<Segment> row_segs = GroupSegments(qt, q0, rows, group);
    const torch::Tensor qs = GroupRows(q, b, hk, group, q0, rows) * scale;
    const torch::Tensor kb = k[b][hk], vb = v[b][hk];
    const int64_t* w = words[b].data_ptr<int64_t>();
    const int64_t m_rows = group * rows;
    torch::Tensor m = torch::full({m_rows}, kNegInf, q.options());
    torch::Tensor l = torch::zeros({m_rows}, q.options());
    torch::Tensor acc = torch::zeros({m_rows, D}, q.options());
    for (const std::vector<Segment>& cols : Chunks(plan.keys_of(qt), o.tile_k, n, o.chunk)) {
      const torch::Tensor kc = Gather(kb, cols), vc = Gather(vb, cols);
      torch::Tensor s = torch::mm(qs, kc.t());
      MaskScores(s, row_segs, cols, w, plan);
      computed += group * static_cast<int64_t>(cols.size());
      for (const Segment& c : cols) full += group * (plan.cls(qt, c.tile) == TileClass::kFull);
      const torch::Tensor m_new = torch::maximum(m, s.amax(1));
      // Rows still without any allowed key keep m = -inf; subtracting a finite stand-in keeps exp() at 0.
      const torch::Tensor m_safe = torch::where(torch::isinf(m_new), torch::zeros_like(m_new), m_new);
      s.sub_(m_safe.unsqueeze(1)).exp_();
      const torch::Tensor correction = (m - m_safe).exp();
      l.mul_(correction).add_(s.sum(1));
      acc.mul_(correction.unsqueeze(1)).addmm_(s, vc);
      m = m_new;
    }
    const torch::Tensor has = l.gt(0);
    const torch::Tensor o_rows =
        torch::where(has.unsqueeze(1), acc / l.clamp_min(1e-30).unsqueeze(1), torch::zeros_like(acc));
    UngroupRows(out, o_rows, b, hk, group, q0, rows);
    UngroupRows(lse, torch::where(has, m + l.clamp_min(1e-30).log(), m), b, hk, group, q0, rows);
  });

  if (stats != nullptr) {
    stats->tiles_computed += computed;
    stats->tiles_full += full;
    for (const TileMask& plan : plans) {
      stats->tiles_total += H * plan.num_q_tiles() * plan.num_k_tiles();
      stats->allowed_pairs += H * plan.allowed_pairs();
    }
  }
  return {out, lse};
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> BitfieldAttentionBackward(
    const torch::Tensor& q_in, const torch::Tensor& k_in, const torch::Tensor& v_in, const torch::Tensor& words_in,
    const torch::Tensor& out_in, const torch::Tensor& lse_in, const torch::Tensor& dout_in,
    const BitfieldAttentionOptions& o) {
  const NoAutocastGuard fp32;
  RECORD_USER_SCOPE(scope::kAttention);
  CheckInputs(q_in, k_in, v_in, words_in, o);
  torch::NoGradGuard no_grad;
  const torch::Tensor q = q_in.contiguous(), k = k_in.contiguous(), v = v_in.contiguous();
  const torch::Tensor words = words_in.contiguous(), lse = lse_in.contiguous();
  const torch::Tensor dout = dout_in.contiguous();
  if (q.is_cuda()) {
    cuda::BitfieldAttentionParams p = CudaParams(q, k, v, words, o);
    const torch::Tensor out = out_in.contiguous();
    torch::Tensor delta = torch::empty_like(lse), dq = torch::zeros_like(q), dk = torch::zeros_like(k),
                  dv = torch::zeros_like(v);
    p.out = const_cast<float*>(out.data_ptr<float>());  // read only in backward
    p.lse = const_cast<float*>(lse.data_ptr<float>());
    p.dout = dout.data_ptr<float>();
    p.delta = delta.data_ptr<float>();
    p.dq = dq.data_ptr<float>();
    p.dk = dk.data_ptr<float>();
    p.dv = dv.data_ptr<float>();
    const c10::DeviceGuard on_device(q.device());
    CheckLaunch(cuda::LaunchBitfieldAttentionBackward(p, CurrentCudaStream(q.device())), "backward");
    return {dq, dk, dv};
  }
  const int64_t B = q.size(0), H = q.size(1), Hkv = k.size(1), n = q.size(2), D = q.size(3), group = H / Hkv;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  const std::vector<TileMask> plans = PlanTiles(words, o);
  const torch::Tensor delta = (dout * out_in).sum(-1);  // [B, H, n]: rowsum(dO * O)
  torch::Tensor dq = torch::zeros_like(q), dk = torch::zeros_like(k), dv = torch::zeros_like(v);
  const int64_t nk = (n + o.tile_k - 1) / o.tile_k;

  // With at least two (sample, kv head) pairs per thread, one task per pair walks all its key tiles and owns its
  // dQ rows too: dQ comes from the same probabilities as dK and dV (5 GEMMs per tile pair, one exp). With fewer,
  // tasks are (sample, kv head, key tile), so dQ rows would be shared between threads: a pass of its own by query
  // tile computes them (7 GEMMs, two exps), as FlashAttention-2 does without atomics.
  const bool fused = B * Hkv >= 2 * static_cast<int64_t>(at::get_num_threads());
  if (!fused) {
    ForEachQueryTile(B, Hkv, n, plans, o, [&](int64_t b, int64_t hk, int64_t qt, int64_t q0, int64_t rows) {
      const TileMask& plan = plans[b];
      const std::vector<Segment> row_segs = GroupSegments(qt, q0, rows, group);
      const torch::Tensor qs = GroupRows(q, b, hk, group, q0, rows) * scale;
      const torch::Tensor d_o = GroupRows(dout, b, hk, group, q0, rows);
      const torch::Tensor row_lse = GroupRows(lse, b, hk, group, q0, rows);
      const torch::Tensor row_delta = GroupRows(delta, b, hk, group, q0, rows);
      const torch::Tensor kb = k[b][hk], vb = v[b][hk];
      torch::Tensor dq_t = torch::zeros({group * rows, D}, q.options());
      for (const std::vector<Segment>& cols : Chunks(plan.keys_of(qt), o.tile_k, n, o.chunk)) {
        const torch::Tensor kc = Gather(kb, cols), vc = Gather(vb, cols);
        torch::Tensor p = torch::mm(qs, kc.t());
        MaskScores(p, row_segs, cols, words[b].data_ptr<int64_t>(), plan);
        ProbabilitiesFromLse(p, row_lse);
        const torch::Tensor ds = p * (torch::mm(d_o, vc.t()) - row_delta.unsqueeze(1));
        dq_t.addmm_(ds, kc);
      }
      UngroupRows(dq, dq_t.mul_(scale), b, hk, group, q0, rows);
    });
  }

  // dK, dV of key tile kt of kv head hk, summing over the query heads that share it; fused, dQ as well.
  const auto key_tile = [&](int64_t b, int64_t hk, int64_t kt) {
    const TileMask& plan = plans[b];
    std::vector<int32_t> queries;
    for (int32_t qt : plan.queries_of(kt)) {
      if (Selected(o, b, qt)) queries.push_back(qt);
    }
    if (queries.empty()) return;
    const int64_t k0 = kt * o.tile_k, cols = std::min(o.tile_k, n - k0);
    const std::vector<Segment> col_segs = {{kt, k0, cols, 0}};
    const torch::Tensor kt_rows = k[b][hk].narrow(0, k0, cols), vt_rows = v[b][hk].narrow(0, k0, cols);
    torch::Tensor dk_t = torch::zeros({cols, D}, q.options()), dv_t = torch::zeros({cols, D}, q.options());
    const auto chunks = Chunks(queries, o.tile_q, n, o.chunk);
    for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
      for (const std::vector<Segment>& rows : chunks) {
        const torch::Tensor qs = Gather(q[b][h], rows) * scale;
        const torch::Tensor d_o = Gather(dout[b][h], rows);
        const torch::Tensor row_lse = Gather1d(lse[b][h], rows), row_delta = Gather1d(delta[b][h], rows);
        torch::Tensor p = torch::mm(qs, kt_rows.t());  // [query rows, cols]
        MaskScores(p, rows, col_segs, words[b].data_ptr<int64_t>(), plan);
        ProbabilitiesFromLse(p, row_lse);
        dv_t.addmm_(p.t(), d_o);
        const torch::Tensor ds = p * (torch::mm(d_o, vt_rows.t()) - row_delta.unsqueeze(1));
        dk_t.addmm_(ds.t(), qs);  // qs carries the scale
        if (fused) {
          const torch::Tensor dq_rows = torch::mm(ds, kt_rows);  // unscaled: dq is scaled once at the end
          for (const Segment& r : rows) {
            dq[b][h].narrow(0, r.begin, r.length).add_(dq_rows.narrow(0, r.offset, r.length));
          }
        }
      }
    }
    dk[b][hk].narrow(0, k0, cols).copy_(dk_t);
    dv[b][hk].narrow(0, k0, cols).copy_(dv_t);
  };
  if (fused) {
    at::parallel_for(0, B * Hkv, 1, [&](int64_t begin, int64_t end) {
      for (int64_t task = begin; task < end; ++task) {
        for (int64_t kt = 0; kt < nk; ++kt) key_tile(task / Hkv, task % Hkv, kt);
      }
    });
    dq.mul_(scale);
  } else {
    at::parallel_for(0, B * Hkv * nk, 1, [&](int64_t begin, int64_t end) {
      for (int64_t task = begin; task < end; ++task) key_tile(task / (Hkv * nk), (task / nk) % Hkv, task % nk);
    });
  }
  return {dq, dk, dv};
}

namespace {

class BitfieldAttentionFunction : public torch::autograd::Function<BitfieldAttentionFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& words) {
    auto [out, lse] = BitfieldAttentionForward(q, k, v, words);
    ctx->save_for_backward({q, k, v, words, out, lse});
    return out;
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    auto [dq, dk, dv] = BitfieldAttentionBackward(saved[0], saved[1], saved[2], saved[3], saved[4], saved[5], grads[0]);
    return {dq, dk, dv, torch::Tensor()};
  }
};

}  // namespace

torch::Tensor BitfieldAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                const torch::Tensor& words) {
  // Widened outside the autograd function, so that under autocast (bf16 q/k/v) the gradients flow back through
  // the casts in the inputs' own dtype.
  return BitfieldAttentionFunction::apply(q.to(torch::kFloat), k.to(torch::kFloat), v.to(torch::kFloat), words);
}

}  // namespace cornstarch
