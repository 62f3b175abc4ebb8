// The span decomposition of the bitfield mask (plan/attention_spans.h) against the mask itself, and the span path
// (model/span_attention.h) against the tiled bitfield kernel. Pure part: on random packed layouts the spans allow
// exactly the pairs MaskAllows allows (every pair of every sample compared). Tensor part: outputs and dQ/dK/dV of
// both fp32 paths agree within |diff| <= 2e-5 + 1e-4 |kernel| (inputs ~N(0, 1); the two sum in different orders).
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <random>

#include "cornstarch/model/bitfield_attention.h"
#include "cornstarch/model/span_attention.h"
#include "cornstarch/plan/attention_spans.h"
#include "cornstarch/plan/bitfield_mask.h"

using namespace cornstarch;

namespace {

// One sample of `seq` tokens: documents of random text and media spans (several instances per document), packed,
// then padding.
std::vector<int64_t> RandomWords(std::mt19937& rng, int64_t seq, int modalities, bool isolate) {
  std::vector<std::vector<MaskSpan>> docs;
  int64_t used = 0;
  const int64_t pad = rng() % 3 == 0 ? 1 + rng() % (seq / 4 + 1) : 0;
  while (used < seq - pad) {
    std::vector<MaskSpan> doc;
    const int spans = 1 + rng() % 5;
    for (int s = 0; s < spans && used < seq - pad; ++s) {
      const int kind = modalities == 0 ? kTextToken : static_cast<int>(rng() % (modalities + 2)) - 2;
      const int64_t len = std::min<int64_t>(seq - pad - used, 1 + rng() % 24);
      doc.push_back({kind == -2 ? kTextToken : kind, len});
      used += len;
    }
    docs.push_back(doc);
  }
  std::vector<int64_t> words = BuildPackedMaskWords(docs, modalities, isolate);
  words.resize(seq, 0);
  return words;
}

// The pairs the spans allow, as an S x S table per sample.
std::vector<std::vector<uint8_t>> AllowedBySpans(const AttentionSpans& spans, int64_t batch, int64_t seq) {
  std::vector<std::vector<uint8_t>> allowed(batch * seq, std::vector<uint8_t>(seq, 0));
  std::vector<int> owners(batch * seq, 0);
  for (const auto& [pass, causal] : {std::pair{&spans.causal, true}, std::pair{&spans.bidirectional, false}}) {
    REQUIRE(pass->cu_seqlens.front() == 0);
    REQUIRE(pass->cu_seqlens.back() == static_cast<int64_t>(pass->rows.size()));
    for (int64_t s = 0; s < pass->segments(); ++s) {
      for (int64_t o : pass->owned) {
        if (o < pass->cu_seqlens[s] || o >= pass->cu_seqlens[s + 1]) continue;
        const int64_t row = pass->rows[o];
        ++owners[row];
        for (int64_t key = pass->cu_seqlens[s]; key < (causal ? o + 1 : pass->cu_seqlens[s + 1]); ++key) {
          REQUIRE(pass->rows[key] / seq == row / seq);  // a segment never crosses samples
          allowed[row][pass->rows[key] % seq] = 1;
        }
      }
    }
  }
  for (int n : owners) REQUIRE(n <= 1);  // one pass owns a row, or none does
  return allowed;
}

void CheckClose(const torch::Tensor& got, const torch::Tensor& ref, const char* what) {
  const double err = ((got - ref).abs() - 1e-4 * ref.abs()).max().item<double>();
  INFO(what << ": worst |diff| - 1e-4|kernel| = " << err);
  CHECK(err <= 2e-5);
}

}  // namespace

TEST_CASE("spans allow exactly the pairs of the bitfield mask on random packed layouts", "[spans]") {
  std::mt19937 rng(7);
  int cases = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t batch = 1 + trial % 3, seq = 1 + rng() % 150;
    const int modalities = trial % 4;
    const bool isolate = trial % 2;
    std::vector<int64_t> words;
    for (int64_t b = 0; b < batch; ++b) {
      const std::vector<int64_t> w = RandomWords(rng, seq, modalities, isolate);
      words.insert(words.end(), w.begin(), w.end());
    }
    const std::optional<AttentionSpans> spans = DecomposeMask(words.data(), batch, seq);
    REQUIRE(spans.has_value());  // the layout's own words always decompose
    const auto allowed = AllowedBySpans(*spans, batch, seq);
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t i = 0; i < seq; ++i) {
        for (int64_t j = 0; j < seq; ++j) {
          INFO("trial " << trial << " sample " << b << " query " << i << " key " << j);
          REQUIRE(static_cast<bool>(allowed[b * seq + i][j]) == MaskAllows(words[b * seq + i], words[b * seq + j], i, j));
        }
      }
    }
    ++cases;
  }
  CHECK(cases == 300);
}

TEST_CASE("hand-made words that are not of span form are reported", "[spans]") {
  const int64_t doc1 = int64_t{1} << 1, doc2 = int64_t{1} << 2, image = int64_t{1} << 3;
  const int64_t text1 = kTextBit | kCausalBit | doc1, text2 = kTextBit | kCausalBit | doc2;
  // A text row whose keys have a hole: the image token between its text shares none of its bits.
  const std::vector<int64_t> hole = {text1, image, text1};
  CHECK_FALSE(DecomposeMask(hole.data(), 1, 3).has_value());
  // Two documents interleaved: their runs overlap.
  const std::vector<int64_t> interleaved = {text1, text2, text1};
  CHECK_FALSE(DecomposeMask(interleaved.data(), 1, 3).has_value());
  // The same tokens laid out one document after the other decompose; padding and a text word without groups are
  // owned by no pass.
  const std::vector<int64_t> packed = {image, text1 | image, text1 | image, text2, kTextBit | kCausalBit, 0};
  const std::optional<AttentionSpans> spans = DecomposeMask(packed.data(), 1, 6);
  REQUIRE(spans.has_value());
  CHECK(spans->causal.rows == std::vector<int64_t>{0, 1, 2, 3});
  CHECK(spans->causal.cu_seqlens == std::vector<int64_t>{0, 3, 4});
  CHECK(spans->causal.owned == std::vector<int64_t>{1, 2, 3});
  CHECK(spans->bidirectional.rows == std::vector<int64_t>{0});
  CHECK(spans->causal.max_seqlen == 3);

  // The span path falls back to the kernel on such words instead of answering wrongly.
  torch::manual_seed(3);
  const torch::Tensor q = torch::randn({1, 2, 3, 16}), k = torch::randn({1, 2, 3, 16}), v = torch::randn({1, 2, 3, 16});
  for (const auto* w : {&hole, &interleaved}) {
    const torch::Tensor words = torch::tensor(*w, torch::kLong).reshape({1, 3});
    CheckClose(SpanAttention(q, k, v, words), BitfieldAttention(q, k, v, words), "fallback output");
  }
}

TEST_CASE("span attention equals the bitfield kernel: outputs and dQ/dK/dV", "[spans]") {
  std::mt19937 rng(11);
  torch::manual_seed(11);
  struct Shape {
    int64_t batch, heads, kv_heads, seq, dim;
  };
  // Lengths that are not multiples of the kernel's 64-token tiles; GQA 4:2, 4:1 and 2:2; head dims 64 and 128.
  for (const Shape& s : {Shape{2, 4, 2, 77, 64}, Shape{1, 4, 1, 131, 128}, Shape{3, 2, 2, 200, 64},
                         Shape{1, 4, 2, 259, 128}}) {
    for (bool isolate : {false, true}) {
      INFO("B=" << s.batch << " H=" << s.heads << " Hkv=" << s.kv_heads << " S=" << s.seq << " D=" << s.dim
                << " isolate=" << isolate);
      std::vector<int64_t> w;
      for (int64_t b = 0; b < s.batch; ++b) {
        const std::vector<int64_t> row = RandomWords(rng, s.seq, 2, isolate);
        w.insert(w.end(), row.begin(), row.end());
      }
      const torch::Tensor words = torch::tensor(w, torch::kLong).reshape({s.batch, s.seq});
      REQUIRE(DecomposeMask(w.data(), s.batch, s.seq).has_value());
      const torch::Tensor q0 = torch::randn({s.batch, s.heads, s.seq, s.dim});
      const torch::Tensor k0 = torch::randn({s.batch, s.kv_heads, s.seq, s.dim});
      const torch::Tensor v0 = torch::randn({s.batch, s.kv_heads, s.seq, s.dim});
      const torch::Tensor dout = torch::randn({s.batch, s.heads, s.seq, s.dim});
      std::vector<torch::Tensor> results[2];
      for (int path = 0; path < 2; ++path) {
        torch::Tensor q = q0.clone().requires_grad_(true), k = k0.clone().requires_grad_(true),
                      v = v0.clone().requires_grad_(true);
        const torch::Tensor out = path == 0 ? BitfieldAttention(q, k, v, words) : SpanAttention(q, k, v, words);
        out.backward(dout);
        results[path] = {out.detach(), q.grad(), k.grad(), v.grad()};
      }
      CheckClose(results[1][0], results[0][0], "output");
      CheckClose(results[1][1], results[0][1], "dq");
      CheckClose(results[1][2], results[0][2], "dk");
      CheckClose(results[1][3], results[0][3], "dv");
    }
  }
}
