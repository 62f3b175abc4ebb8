#include <catch2/catch.hpp>
#include <numeric>
#include <random>

#include "cornstarch/plan/bitfield_mask.h"
#include "cornstarch/plan/cp_balancer.h"

using namespace cornstarch;

namespace {

std::vector<MaskSpan> RandomSpans(std::mt19937& rng, int64_t n) {
  std::vector<MaskSpan> spans;
  for (int64_t used = 0; used < n;) {
    const int kind = static_cast<int>(rng() % 5) - 2;  // pad, text, modality 0..2
    const int64_t len = std::min<int64_t>(n - used, 1 + rng() % (n / 4));
    spans.push_back({kind, len});
    used += len;
  }
  return spans;
}

void CheckAssignment(const CpAssignment& a, const std::vector<int64_t>& work, int cp) {
  std::vector<int> seen(work.size(), 0);
  for (int r = 0; r < cp; ++r) {
    CHECK(a.blocks[r].size() == work.size() / cp);
    int64_t sum = 0;
    for (int64_t b : a.blocks[r]) ++seen[b], sum += work[b];
    CHECK(sum == a.work[r]);
  }
  for (int s : seen) CHECK(s == 1);
}

}  // namespace

TEST_CASE("block work counts the allowed pairs of the block's rows", "[cp]") {
  std::mt19937 rng(2);
  for (int trial = 0; trial < 10; ++trial) {
    const int64_t n = 64 + 37 * trial;
    const std::vector<int64_t> w = BuildMaskWords(RandomSpans(rng, n), 3, trial % 2 == 0);
    const std::vector<int64_t> work = BlockWork(w.data(), n, 16);
    REQUIRE(static_cast<int64_t>(work.size()) == (n + 15) / 16);
    for (size_t b = 0; b < work.size(); ++b) {
      int64_t expected = 0;
      for (int64_t i = b * 16; i < std::min<int64_t>(n, (b + 1) * 16); ++i)
        for (int64_t j = 0; j < n; ++j) expected += MaskAllows(w[i], w[j], i, j);
      CHECK(work[b] == expected);
    }
  }
}

TEST_CASE("every split assigns each block once with equal block counts", "[cp]") {
  std::mt19937 rng(3);
  for (int cp : {1, 2, 4, 8}) {
    std::vector<int64_t> work(cp * 6);
    for (int64_t& x : work) x = rng() % 1000;
    for (CpSplit split : {CpSplit::kContiguous, CpSplit::kZigzag, CpSplit::kBalanced}) {
      INFO(NameOf(split) << " cp=" << cp);
      CheckAssignment(AssignBlocks(work, cp, split), work, cp);
    }
  }
  // Zigzag: rank r holds runs r and 2cp-1-r.
  const CpAssignment z = AssignBlocks(std::vector<int64_t>(8, 1), 2, CpSplit::kZigzag);
  CHECK(z.blocks[0] == std::vector<int64_t>{0, 1, 6, 7});
  CHECK(z.blocks[1] == std::vector<int64_t>{2, 3, 4, 5});
}

TEST_CASE("balanced is never worse than contiguous or zigzag on adversarial layouts", "[cp]") {
  std::mt19937 rng(4);
  for (int trial = 0; trial < 60; ++trial) {
    const int cp = 2 << (trial % 3);
    const int64_t block = 32, n = block * cp * (2 + trial % 7);
    const std::vector<int64_t> w = BuildMaskWords(RandomSpans(rng, n), 3, trial % 2 == 1);
    const std::vector<int64_t> work = BlockWork(w.data(), n, block);
    const double balanced = AssignBlocks(work, cp, CpSplit::kBalanced).max_over_mean();
    INFO("trial " << trial << " cp " << cp);
    CHECK(balanced <= AssignBlocks(work, cp, CpSplit::kContiguous).max_over_mean() + 1e-12);
    CHECK(balanced <= AssignBlocks(work, cp, CpSplit::kZigzag).max_over_mean() + 1e-12);
  }
}

TEST_CASE("realistic MLLM layouts balance to max/mean <= 1.05; contiguous does not", "[cp]") {
  for (int64_t n : {8192, 16384}) {
    // One 576-token image and a 1500-token audio clip near the start, then text: heavy bidirectional blocks up
    // front, causal growth after.
    const std::vector<int64_t> w =
        BuildMaskWords({{kTextToken, 32}, {0, 576}, {1, 1500}, {kTextToken, n - 32 - 576 - 1500}}, 2);
    const std::vector<int64_t> work = BlockWork(w.data(), n, 128);
    for (int cp : {2, 4, 8}) {
      INFO("n " << n << " cp " << cp);
      CHECK(AssignBlocks(work, cp, CpSplit::kBalanced).max_over_mean() <= 1.05);
      CHECK(AssignBlocks(work, cp, CpSplit::kContiguous).max_over_mean() > 1.2);
    }
  }
}
