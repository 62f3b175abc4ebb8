// The tiled bitfield kernel against an independent dense reference: the mask materialised pair by pair from
// MaskAllows, softmax and gradients in float64 via autograd. Tolerance (fp32 kernel vs fp64 reference, inputs
// ~N(0, 1)): |diff| <= 2e-5 + 1e-4 * |ref| for outputs and all three input gradients.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <random>

#include "cornstarch/model/bitfield_attention.h"
#include "cornstarch/plan/bitfield_mask.h"
#include "cornstarch/plan/tile_mask.h"
#include "cornstarch/device/torch_runtime.h"

using namespace cornstarch;

namespace {

// A random layout of `n` tokens: spans of text, padding and up to `modalities` modalities.
std::vector<MaskSpan> RandomSpans(std::mt19937& rng, int64_t n, int modalities, bool pad_tail) {
  std::vector<MaskSpan> spans;
  int64_t left = n;
  while (left > 0) {
    const int kind = modalities == 0 ? kTextToken : static_cast<int>(rng() % (modalities + 1)) - 1;
    const int64_t len = std::min<int64_t>(left, 1 + rng() % std::max<int64_t>(1, n / 3));
    spans.push_back({kind, len});
    left -= len;
  }
  if (pad_tail && n > 2) {
    spans.back().length = std::max<int64_t>(1, spans.back().length - 2);
    spans.push_back({kPadToken, n - [&] { int64_t s = 0; for (auto& x : spans) s += x.length; return s; }()});
  }
  return spans;
}

torch::Tensor DenseMask(const std::vector<int64_t>& w) {
  const int64_t n = static_cast<int64_t>(w.size());
  torch::Tensor mask = torch::zeros({n, n}, torch::kBool);
  auto a = mask.accessor<bool, 2>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) a[i][j] = MaskAllows(w[i], w[j], i, j);
  return mask;
}

// Dense float64 reference; fully masked rows give 0.
torch::Tensor Reference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        const torch::Tensor& mask) {
  const int64_t group = q.size(1) / k.size(1);
  const torch::Tensor kk = k.repeat_interleave(group, 1), vv = v.repeat_interleave(group, 1);
  torch::Tensor s = torch::matmul(q, kk.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(-1)));
  s = s.masked_fill(mask.logical_not(), -std::numeric_limits<double>::infinity());
  torch::Tensor p = torch::softmax(s, -1);
  p = torch::where(mask, p, torch::zeros_like(p));  // NaN rows (nothing allowed) -> 0
  return torch::matmul(p, vv);
}

void CheckClose(const torch::Tensor& got, const torch::Tensor& ref, const char* what) {
  const torch::Tensor r = ref.to(torch::kFloat);
  const double err = ((got - r).abs() - 1e-4 * r.abs()).max().item<double>();
  INFO(what << ": worst |diff| - 1e-4|ref| = " << err);
  CHECK(err <= 2e-5);
}

struct Case {
  int64_t n, d, heads, kv_heads;
  int modalities;
  bool isolate;
};

}  // namespace

TEST_CASE("bitfield attention matches the dense float64 reference, forward and backward", "[attention]") {
  // 2 threads, batch 2: one kv head runs the two-pass backward, 2 or more the fused one (dQ with dK, dV).
  ConfigureTorchRuntime(2);
  std::mt19937 rng(11);
  const std::vector<Case> cases = {
      {1, 64, 2, 1, 0, false},   {2, 64, 4, 2, 1, false},   {97, 64, 4, 2, 2, false},  {97, 128, 2, 2, 3, true},
      {130, 16, 3, 1, 1, true},  {1025, 64, 2, 1, 2, false}, {1025, 128, 4, 4, 3, true}, {200, 72, 2, 2, 0, false},
  };
  for (const Case& c : cases) {
    INFO("n=" << c.n << " d=" << c.d << " heads=" << c.heads << "/" << c.kv_heads << " modalities=" << c.modalities
              << " isolate=" << c.isolate);
    const int64_t batch = 2;
    std::vector<torch::Tensor> word_rows, masks;
    for (int64_t b = 0; b < batch; ++b) {
      // The second row packs two documents (the second padded at its end).
      const int64_t first = b == 1 && c.n > 8 ? c.n / 3 : c.n;
      std::vector<std::vector<MaskSpan>> docs = {RandomSpans(rng, first, c.modalities, false)};
      if (first < c.n) docs.push_back(RandomSpans(rng, c.n - first, c.modalities, true));
      const auto words = BuildPackedMaskWords(docs, c.modalities, c.isolate);
      word_rows.push_back(torch::tensor(words));
      masks.push_back(DenseMask(words));
    }
    const torch::Tensor words = torch::stack(word_rows);
    const torch::Tensor mask = torch::stack(masks).unsqueeze(1);
    torch::manual_seed(c.n * 31 + c.d);
    const torch::Tensor q0 = torch::randn({batch, c.heads, c.n, c.d});
    const torch::Tensor k0 = torch::randn({batch, c.kv_heads, c.n, c.d});
    const torch::Tensor v0 = torch::randn({batch, c.kv_heads, c.n, c.d});
    const torch::Tensor dout = torch::randn({batch, c.heads, c.n, c.d});

    torch::Tensor q = q0.clone().requires_grad_(true), k = k0.clone().requires_grad_(true),
                  v = v0.clone().requires_grad_(true);
    const torch::Tensor out = BitfieldAttention(q, k, v, words);
    out.backward(dout);

    torch::Tensor rq = q0.to(torch::kDouble).requires_grad_(true), rk = k0.to(torch::kDouble).requires_grad_(true),
                  rv = v0.to(torch::kDouble).requires_grad_(true);
    const torch::Tensor ref = Reference(rq, rk, rv, mask);
    ref.backward(dout.to(torch::kDouble));

    CheckClose(out, ref, "out");
    CheckClose(q.grad(), rq.grad(), "dq");
    CheckClose(k.grad(), rk.grad(), "dk");
    CheckClose(v.grad(), rv.grad(), "dv");
    CHECK(out.isfinite().all().item<bool>());
    // Rows with nothing allowed are exact zeros with exact zero gradients.
    const torch::Tensor empty_rows = mask.squeeze(1).any(-1).logical_not();  // [B, n]
    if (empty_rows.any().item<bool>()) {
      const torch::Tensor sel = empty_rows.unsqueeze(1).unsqueeze(-1).expand_as(out);
      CHECK(out.masked_select(sel).abs().max().item<float>() == 0.0f);
      CHECK(q.grad().masked_select(sel).abs().max().item<float>() == 0.0f);
    }
  }
}

TEST_CASE("exactly the tiles with an allowed pair are computed; full tiles skip the element mask", "[attention]") {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 6; ++trial) {
    const int64_t n = 150 + 97 * trial, heads = 2;
    const int modalities = trial % 4;
    const auto words = BuildMaskWords(RandomSpans(rng, n, modalities, trial % 2 == 1), modalities, trial % 3 == 0);
    const torch::Tensor mask = DenseMask(words).to(torch::kLong);
    BitfieldAttentionOptions options;
    options.tile_q = 32;
    options.tile_k = 64;
    const TileMask plan(words.data(), n, options.tile_q, options.tile_k);
    int64_t nonempty = 0, full = 0, pairs = 0;
    for (int64_t q0 = 0; q0 < n; q0 += options.tile_q) {
      for (int64_t k0 = 0; k0 < n; k0 += options.tile_k) {
        const torch::Tensor tile =
            mask.narrow(0, q0, std::min(options.tile_q, n - q0)).narrow(1, k0, std::min(options.tile_k, n - k0));
        const int64_t allowed = tile.sum().item<int64_t>();
        nonempty += allowed > 0;
        full += allowed == tile.numel();
        pairs += allowed;
        // The tile's bounds: from its first to its last row and column with an allowed pair.
        const TileBounds& box = plan.bounds(q0 / options.tile_q, k0 / options.tile_k);
        if (allowed == 0) {
          CHECK((box.row_begin == box.row_end && box.col_begin == box.col_end));
          continue;
        }
        const torch::Tensor rows = tile.any(1).nonzero(), cols = tile.any(0).nonzero();
        CHECK(box.row_begin == q0 + rows.min().item<int64_t>());
        CHECK(box.row_end == q0 + rows.max().item<int64_t>() + 1);
        CHECK(box.col_begin == k0 + cols.min().item<int64_t>());
        CHECK(box.col_end == k0 + cols.max().item<int64_t>() + 1);
      }
    }
    const torch::Tensor w = torch::tensor(words).view({1, n});
    BitfieldAttentionStats stats;
    BitfieldAttentionForward(torch::randn({1, heads, n, 16}), torch::randn({1, 1, n, 16}), torch::randn({1, 1, n, 16}),
                             w, options, &stats);
    INFO("trial " << trial);
    CHECK(stats.tiles_computed == heads * nonempty);
    CHECK(stats.tiles_full == heads * full);
    CHECK(stats.allowed_pairs == heads * pairs);
    CHECK(stats.tiles_total == heads * ((n + 31) / 32) * ((n + 63) / 64));
    CHECK(stats.tiles_computed < stats.tiles_total);  // causal text alone leaves tiles above the diagonal
  }
}

TEST_CASE("scores no row allows at a modality boundary inside a tile are not computed", "[attention]") {
  // 32 text tokens, a 576-token image (32..607), a 416-token audio clip (608..1023); tiles of 64. Modality rows
  // see only their own span, so each query tile's keys run from its first allowed column to its last:
  //   tile 0 (text, image)  0..607: 608     tiles 1-8 (image)      32..607: 576 each
  //   tile 9 (image, audio) 32..1023: 992   tiles 10-15 (audio)  608..1023: 416 each
  // 64 rows x 8704 columns per head; whole tiles would be 64 x (10 + 8 x 10 + 16 + 6 x 7) x 64 = 606208.
  const int64_t n = 1024, heads = 2;
  const auto words = BuildMaskWords({{kTextToken, 32}, {0, 576}, {1, 416}}, 2);
  BitfieldAttentionOptions options;
  options.tile_q = options.tile_k = 64;
  BitfieldAttentionStats stats;
  BitfieldAttentionForward(torch::randn({1, heads, n, 16}), torch::randn({1, 1, n, 16}), torch::randn({1, 1, n, 16}),
                           torch::tensor(words).view({1, n}), options, &stats);
  CHECK(stats.pairs_computed == heads * 64 * 8704);
  CHECK(stats.allowed_pairs == heads * (32 * 33 / 2 + 576 * 576 + 416 * 416));
}

TEST_CASE("instance isolation keeps two images apart while text sees both", "[attention][mask]") {
  const std::vector<MaskSpan> spans = {{kTextToken, 2}, {0, 3}, {0, 3}, {kTextToken, 2}};
  const auto shared = BuildMaskWords(spans, 1, false);
  const auto isolated = BuildMaskWords(spans, 1, true);
  CHECK(MaskAllows(shared[5], shared[2], 5, 2));        // image 2 sees image 1 when not isolated
  CHECK_FALSE(MaskAllows(isolated[5], isolated[2], 5, 2));
  CHECK(MaskAllows(isolated[5], isolated[6], 5, 6));    // within an image: bidirectional
  CHECK(MaskAllows(isolated[8], isolated[2], 8, 2));    // text after both sees both
  CHECK(MaskAllows(isolated[8], isolated[5], 8, 5));
  CHECK_FALSE(MaskAllows(isolated[2], isolated[8], 2, 8));
  CHECK_FALSE(MaskAllows(isolated[1], isolated[2], 1, 2));  // causal: text before an image does not see it
  std::vector<MaskSpan> many(61, MaskSpan{0, 1});  // 61 instances + the document's bit
  CHECK_THROWS_WITH(BuildMaskWords(many, 1, true), Catch::Contains("more than 61 attention groups"));
  many.pop_back();
  CHECK(MaskGroupsNeeded(many, true) == 61);
  CHECK(BuildMaskWords(many, 1, true).size() == 60);
  CHECK_THROWS_WITH(BuildMaskWords({{3, 1}}, 2), Catch::Contains("span 0 has modality 3, expected 0..1"));
}

TEST_CASE("a query-tile selection computes exactly those rows and their share of dK, dV", "[attention]") {
  // Two complementary selections must reproduce the full kernel row by row, and their dK/dV must add up to it:
  // what context parallelism relies on.
  // Two kv heads: 1 thread runs the fused backward, 2 threads the two-pass one.
  for (const int threads : {1, 2}) {
    INFO(threads << " threads");
    at::set_num_threads(threads);
    const int64_t n = 320, D = 8;
    const std::vector<int64_t> w = BuildMaskWords({{kTextToken, 40}, {0, 150}, {kTextToken, 100}, {kPadToken, 30}}, 1);
    const torch::Tensor words = torch::tensor(w).reshape({1, n});
    torch::manual_seed(3);
    const torch::Tensor q = torch::randn({1, 4, n, D}), k = torch::randn({1, 2, n, D}), v = torch::randn({1, 2, n, D});
    const torch::Tensor dout = torch::randn({1, 4, n, D});
    const auto [out, lse] = BitfieldAttentionForward(q, k, v, words);
    const auto [dq, dk, dv] = BitfieldAttentionBackward(q, k, v, words, out, lse, dout);
    BitfieldAttentionOptions even, odd;
    even.query_tiles = {{1, 0, 1, 0, 1}};
    odd.query_tiles = {{0, 1, 0, 1, 0}};
    const torch::Tensor rows_even = torch::arange(n).div(64, "floor").remainder(2).eq(0).view({1, 1, n, 1});
    torch::Tensor sum_dk = torch::zeros_like(dk), sum_dv = torch::zeros_like(dv);
    for (const auto* o : {&even, &odd}) {
      const torch::Tensor mine = o == &even ? rows_even : rows_even.logical_not();
      const auto [o_out, o_lse] = BitfieldAttentionForward(q, k, v, words, *o);
      CHECK(torch::allclose(o_out, torch::where(mine, out, torch::zeros_like(out)), 1e-5, 1e-6));
      // Upstream gradients of the other rows are zero, as a CP rank sees them.
      const torch::Tensor d = torch::where(mine, dout, torch::zeros_like(dout));
      const auto [o_dq, o_dk, o_dv] = BitfieldAttentionBackward(q, k, v, words, o_out, o_lse, d, *o);
      CHECK(torch::allclose(o_dq, torch::where(mine, dq, torch::zeros_like(dq)), 1e-5, 1e-6));
      sum_dk += o_dk, sum_dv += o_dv;
    }
    CHECK(torch::allclose(sum_dk, dk, 1e-4, 1e-5));
    CHECK(torch::allclose(sum_dv, dv, 1e-4, 1e-5));
  }
}
