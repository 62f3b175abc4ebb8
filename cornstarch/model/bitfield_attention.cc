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
#include "cornstarch/device/cpu_tasks.h"
#include "cornstarch/device/cuda_stream.h"
#include "cornstarch/device/profile_scopes.h"
#include "kernels/bitfield_attention_cuda.h"

namespace cornstarch {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// A piece of the sequence cut at tile boundaries: tiles [first, end), positions [begin, begin + length).
struct Piece {
  int64_t first, end, begin, length;
};

// The listed tiles (ascending) as contiguous runs, each cut into pieces of at most max(limit, tile) positions: a
// piece of keys (or queries) is then a plain view of the [n, ...] rows, never a gathered copy.
std::vector<Piece> Pieces(const std::vector<int32_t>& tiles, int64_t tile, int64_t n, int64_t limit) {
  std::vector<Piece> pieces;
  for (const int32_t t : tiles) {
    const int64_t begin = t * tile, length = std::min(tile, n - begin);
    if (!pieces.empty() && pieces.back().end == t && pieces.back().length + length <= std::max(limit, tile)) {
      pieces.back().end = t + 1;
      pieces.back().length += length;
    } else {
      pieces.push_back({t, t + 1, begin, length});
    }
  }
  return pieces;
}

// The layout the kernels compute in: [B, Hkv, n, group, ...], the `group` query heads that share a kv head
// interleaved token by token. A run of query positions of all of them is then one contiguous block of rows (row i
// of a block starting at position a is position a + i / group), so the grouped heads share every key GEMM, which
// is group times taller, without a gather. x is [B, H, n] or [B, H, n, D], contiguous.
torch::Tensor Grouped(const torch::Tensor& x, int64_t kv_heads) {
  std::vector<int64_t> shape = {x.size(0), kv_heads, x.size(1) / kv_heads, x.size(2)};
  if (x.dim() == 4) shape.push_back(x.size(3));
  return x.view(shape).transpose(2, 3).contiguous();
}

// [B, Hkv, n, group, ...] back to [B, H, n, ...].
torch::Tensor Ungrouped(const torch::Tensor& g) {
  std::vector<int64_t> shape = {g.size(0), g.size(1) * g.size(3), g.size(2)};
  if (g.dim() == 5) shape.push_back(g.size(4));
  return g.transpose(2, 3).reshape(shape);
}

// Rows of positions `rows` of one (sample, kv head) of a grouped tensor ([n, group, D] or [n, group]):
// [group * length, D] (or [group * length]), a view.
torch::Tensor Rows(const torch::Tensor& x, const Piece& rows) {
  const torch::Tensor part = x.narrow(0, rows.begin, rows.length);
  return x.dim() == 3 ? part.view({-1, x.size(2)}) : part.view({-1});
}

// Without the columns that no row of query tile qt allows at the ends of `cols` (a span boundary inside its first
// or last tile): fewer scores to compute, the same result.
Piece TrimColumns(const Piece& cols, int64_t qt, const TileMask& tiles) {
  const int64_t begin = tiles.bounds(qt, cols.first).col_begin, end = tiles.bounds(qt, cols.end - 1).col_end;
  return {cols.first, cols.end, begin, end - begin};
}

// Likewise the rows of `rows` at its ends that allow nothing in key tile kt.
Piece TrimRows(const Piece& rows, int64_t kt, const TileMask& tiles) {
  const int64_t begin = tiles.bounds(rows.first, kt).row_begin, end = tiles.bounds(rows.end - 1, kt).row_end;
  return {rows.first, rows.end, begin, end - begin};
}

// Sets the disallowed scores of a block to -inf: its rows are positions `rows` of `group` heads each (grouped
// layout), its columns positions `cols`, row stride `ld`; either may start or end inside a tile. Only tile pairs
// that are not full are checked.
void MaskBlock(float* s, int64_t ld, const Piece& rows, int64_t group, const Piece& cols, const int64_t* words,
               const TileMask& tiles) {
  const int64_t row_end = rows.begin + rows.length, col_end = cols.begin + cols.length;
  for (int64_t qt = rows.first; qt < rows.end; ++qt) {
    for (int64_t kt = cols.first; kt < cols.end; ++kt) {
      if (tiles.cls(qt, kt) == TileClass::kFull) continue;
      const int64_t a_begin = std::max(rows.begin, qt * tiles.tile_q());
      const int64_t a_end = std::min(row_end, (qt + 1) * tiles.tile_q());
      const int64_t c_begin = std::max(cols.begin, kt * tiles.tile_k());
      const int64_t c_end = std::min(col_end, (kt + 1) * tiles.tile_k());
      for (int64_t a = a_begin; a < a_end; ++a) {
        float* row = s + (a - rows.begin) * group * ld - cols.begin;
        for (int64_t c = c_begin; c < c_end; ++c) {
          if (MaskAllows(words[a], words[c], a, c)) continue;
          for (int64_t g = 0; g < group; ++g) row[g * ld + c] = kNegInf;
        }
      }
    }
  }
}

// exp(s - lse) in place, one lse per row: the probabilities from the forward's log-sum-exp (clamped, see the
// caller).
void ProbabilitiesFromLse(torch::Tensor& s, const torch::Tensor& lse) { s.sub_(lse.unsqueeze(1)).exp_(); }

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

// Runs fn(b, hk, rows) in parallel for every selected (batch, kv head, query tile) with something allowed; `rows`
// is the query tile as a piece.
template <class Fn>
void ForEachQueryTile(int64_t batch, int64_t kv_heads, int64_t n, const std::vector<TileMask>& plans,
                      const BitfieldAttentionOptions& o, const Fn& fn) {
  const int64_t nq = (n + o.tile_q - 1) / o.tile_q;
  ParallelTasks(batch * kv_heads * nq, [&](int64_t task) {
    // Last query tiles first: under causal masks they have the most keys, and the small ones then fill the gaps.
    const int64_t b = task / (kv_heads * nq), hk = (task / nq) % kv_heads, qt = nq - 1 - task % nq;
    if (plans[b].keys_of(qt).empty() || !Selected(o, b, qt)) return;
    const int64_t q0 = qt * o.tile_q;
    fn(b, hk, Piece{qt, qt + 1, q0, std::min(o.tile_q, n - q0)});
  });
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
  const int64_t B = q.size(0), Hkv = k.size(1), n = q.size(2), D = q.size(3), group = q.size(1) / Hkv;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  const std::vector<TileMask> plans = PlanTiles(words, o);
  const torch::Tensor qg = Grouped(q * scale, Hkv);
  torch::Tensor out = torch::zeros_like(qg);
  torch::Tensor lse = torch::full({B, Hkv, n, group}, kNegInf, q.options());
  std::atomic<int64_t> computed{0}, full{0}, scores{0};

  ForEachQueryTile(B, Hkv, n, plans, o, [&](int64_t b, int64_t hk, const Piece& rows) {
    const TileMask& plan = plans[b];
    const torch::Tensor qs = Rows(qg[b][hk], rows), kb = k[b][hk], vb = v[b][hk];
    const int64_t m_rows = qs.size(0);
    const int64_t* w = words[b].data_ptr<int64_t>();
    // The online softmax's running row max m and sum l stay in plain arrays: per row they are scalars, and
    // LibTorch ops on them would cost more than the arithmetic.
    std::vector<float> m(m_rows, kNegInf), l(m_rows, 0.0f);
    torch::Tensor correction = torch::empty({m_rows, 1}, q.options());
    torch::Tensor acc = torch::zeros({m_rows, D}, q.options());
    float* corr = correction.data_ptr<float>();
    for (const Piece& piece : Pieces(plan.keys_of(rows.first), o.tile_k, n, o.chunk)) {
      const Piece cols = TrimColumns(piece, rows.first, plan);
      const torch::Tensor kc = kb.narrow(0, cols.begin, cols.length);
      torch::Tensor s = torch::mm(qs, kc.t());
      MaskBlock(s.data_ptr<float>(), cols.length, rows, group, cols, w, plan);
      computed += group * (cols.end - cols.first);
      scores += m_rows * cols.length;
      for (int64_t kt = cols.first; kt < cols.end; ++kt) full += group * (plan.cls(rows.first, kt) == TileClass::kFull);
      torch::Tensor shift = s.amax(1, /*keepdim=*/true);
      float* mx = shift.data_ptr<float>();
      for (int64_t i = 0; i < m_rows; ++i) {
        const float m_new = std::max(m[i], mx[i]);
        // Rows still without any allowed key keep m = -inf; shifting by 0 instead keeps exp() at 0, not NaN.
        mx[i] = std::isinf(m_new) ? 0.0f : m_new;
        corr[i] = std::exp(m[i] - mx[i]);
        m[i] = m_new;
      }
      s.sub_(shift).exp_();
      const torch::Tensor sums = s.sum(1);
      const float* sum = sums.data_ptr<float>();
      for (int64_t i = 0; i < m_rows; ++i) l[i] = l[i] * corr[i] + sum[i];
      acc.mul_(correction).addmm_(s, vb.narrow(0, cols.begin, cols.length));
    }
    const float* a = acc.data_ptr<float>();
    float* o_rows = Rows(out[b][hk], rows).data_ptr<float>();
    float* lse_rows = Rows(lse[b][hk], rows).data_ptr<float>();
    for (int64_t i = 0; i < m_rows; ++i) {
      if (l[i] <= 0) continue;  // nothing allowed: the output stays 0 and the lse -inf
      for (int64_t d = 0; d < D; ++d) o_rows[i * D + d] = a[i * D + d] / l[i];
      lse_rows[i] = m[i] + std::log(l[i]);
    }
  });

  if (stats != nullptr) {
    stats->tiles_computed += computed;
    stats->tiles_full += full;
    stats->pairs_computed += scores;
    for (const TileMask& plan : plans) {
      stats->tiles_total += q.size(1) * plan.num_q_tiles() * plan.num_k_tiles();
      stats->allowed_pairs += q.size(1) * plan.allowed_pairs();
    }
  }
  return {Ungrouped(out), Ungrouped(lse)};
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
  const int64_t B = q.size(0), Hkv = k.size(1), n = q.size(2), D = q.size(3), group = q.size(1) / Hkv;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  const std::vector<TileMask> plans = PlanTiles(words, o);
  const torch::Tensor qg = Grouped(q * scale, Hkv), dog = Grouped(dout, Hkv);
  // A -inf lse (nothing allowed) is clamped to the lowest float: such rows hold only -inf scores, and
  // exp(-inf - lowest) = 0, so they vanish instead of becoming NaN.
  const torch::Tensor lseg = Grouped(lse.clamp_min(std::numeric_limits<float>::lowest()), Hkv);
  const torch::Tensor deltag = Grouped((dout * out_in).sum(-1), Hkv);  // rowsum(dO * O)
  torch::Tensor dqg = torch::zeros_like(qg), dk = torch::zeros_like(k), dv = torch::zeros_like(v);
  const int64_t nk = (n + o.tile_k - 1) / o.tile_k;

  // With at least two (sample, kv head) pairs per thread, one task per pair walks all its key tiles and owns its
  // dQ rows too: dQ comes from the same probabilities as dK and dV (5 GEMMs per tile pair, one exp). With fewer,
  // tasks are (sample, kv head, key tile), so dQ rows would be shared between threads: a pass of its own by query
  // tile computes them (7 GEMMs, two exps), as FlashAttention-2 does without atomics.
  const bool fused = B * Hkv >= 2 * static_cast<int64_t>(at::get_num_threads());
  // One (sample, kv head)'s tensors, indexed once per task rather than per tile.
  struct Head {
    torch::Tensor q, dout, lse, delta, dq, k, v, dk, dv;
    const int64_t* words;
  };
  const auto head = [&](int64_t b, int64_t hk) {
    return Head{qg[b][hk], dog[b][hk], lseg[b][hk], deltag[b][hk], dqg[b][hk], k[b][hk], v[b][hk], dk[b][hk],
                dv[b][hk], words[b].data_ptr<int64_t>()};
  };
  if (!fused) {
    ForEachQueryTile(B, Hkv, n, plans, o, [&](int64_t b, int64_t hk, const Piece& rows) {
      const TileMask& plan = plans[b];
      const Head h = head(b, hk);
      const torch::Tensor qs = Rows(h.q, rows), d_o = Rows(h.dout, rows);
      const torch::Tensor row_lse = Rows(h.lse, rows), row_delta = Rows(h.delta, rows);
      torch::Tensor dq_rows = Rows(h.dq, rows);
      for (const Piece& piece : Pieces(plan.keys_of(rows.first), o.tile_k, n, o.chunk)) {
        const Piece cols = TrimColumns(piece, rows.first, plan);
        const torch::Tensor kc = h.k.narrow(0, cols.begin, cols.length), vc = h.v.narrow(0, cols.begin, cols.length);
        torch::Tensor p = torch::mm(qs, kc.t());
        MaskBlock(p.data_ptr<float>(), cols.length, rows, group, cols, h.words, plan);
        ProbabilitiesFromLse(p, row_lse);
        const torch::Tensor ds = torch::mm(d_o, vc.t()).sub_(row_delta.unsqueeze(1)).mul_(p);
        dq_rows.addmm_(ds, kc);
      }
    });
  }

  // dK, dV of key tile kt of one (sample, kv head), summing over the query heads that share it (their rows are
  // stacked in the grouped layout); fused, dQ as well.
  const auto key_tile = [&](const Head& h, int64_t b, int64_t kt) {
    const TileMask& plan = plans[b];
    std::vector<int32_t> queries;
    for (int32_t qt : plan.queries_of(kt)) {
      if (Selected(o, b, qt)) queries.push_back(qt);
    }
    if (queries.empty()) return;
    const int64_t k0 = kt * o.tile_k;
    const Piece cols{kt, kt + 1, k0, std::min(o.tile_k, n - k0)};
    const torch::Tensor kc = h.k.narrow(0, k0, cols.length), vc = h.v.narrow(0, k0, cols.length);
    torch::Tensor dk_rows = h.dk.narrow(0, k0, cols.length), dv_rows = h.dv.narrow(0, k0, cols.length);
    for (const Piece& piece : Pieces(queries, o.tile_q, n, o.chunk)) {
      const Piece rows = TrimRows(piece, kt, plan);
      const torch::Tensor qs = Rows(h.q, rows), d_o = Rows(h.dout, rows);
      torch::Tensor p = torch::mm(qs, kc.t());  // [group * query rows, cols]
      MaskBlock(p.data_ptr<float>(), cols.length, rows, group, cols, h.words, plan);
      ProbabilitiesFromLse(p, Rows(h.lse, rows));
      dv_rows.addmm_(p.t(), d_o);
      const torch::Tensor ds = torch::mm(d_o, vc.t()).sub_(Rows(h.delta, rows).unsqueeze(1)).mul_(p);
      dk_rows.addmm_(ds.t(), qs);  // qs carries the scale
      if (fused) Rows(h.dq, rows).addmm_(ds, kc);  // unscaled: dQ is scaled once at the end
    }
  };
  if (fused) {
    ParallelTasks(B * Hkv, [&](int64_t task) {
      const int64_t b = task / Hkv;
      const Head h = head(b, task % Hkv);
      for (int64_t kt = 0; kt < nk; ++kt) key_tile(h, b, kt);
    });
  } else {
    ParallelTasks(B * Hkv * nk, [&](int64_t task) {
      const int64_t b = task / (Hkv * nk);
      key_tile(head(b, (task / nk) % Hkv), b, task % nk);
    });
  }
  // Both paths summed dS K without the softmax scale: dQ = scale * dS K.
  return {Ungrouped(dqg).mul_(scale), dk, dv};
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
