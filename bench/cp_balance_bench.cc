// Context-parallel load balance of the three splits on realistic MLLM layouts (pure computation): max/mean of the
// per-rank attention work (allowed query-key pairs under the bitfield mask), blocks of 128 tokens.
//   bazel run -c opt //bench:cp_balance_bench
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/mllm_layouts.h"
#include "cornstarch/plan/bitfield_mask.h"
#include "cornstarch/plan/cp_balancer.h"

using namespace cornstarch;

int main() {
  constexpr int64_t kBlock = 128;
  std::printf("%-18s %6s %3s | %10s %10s %10s | %8s\n", "layout", "N", "cp", "contiguous", "zigzag", "balanced",
              "plan ms");
  for (const std::string& layout : bench::MllmLayoutNames()) {
    for (int64_t n : {8192, 16384, 32768, 65536}) {
      // Interleaved images are isolated from each other while they fit the 61 instance bits.
      const std::vector<MaskSpan> spans = bench::MllmLayout(layout, n);
      const bool isolate = layout == "interleaved" && n / 1024 < kMaxGroups;
      const std::vector<int64_t> words = BuildMaskWords(spans, 2, isolate);
      for (int cp : {2, 4, 8}) {
        const auto start = std::chrono::steady_clock::now();
        const std::vector<int64_t> work = BlockWork(words.data(), n, kBlock);
        const double balanced = AssignBlocks(work, cp, CpSplit::kBalanced).max_over_mean();
        const double ms = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() * 1e3;
        std::printf("%-18s %6lld %3d | %10.3f %10.3f %10.3f | %8.1f\n", layout.c_str(), static_cast<long long>(n), cp,
                    AssignBlocks(work, cp, CpSplit::kContiguous).max_over_mean(),
                    AssignBlocks(work, cp, CpSplit::kZigzag).max_over_mean(), balanced, ms);
      }
    }
  }
  std::printf("\nmax/mean per-rank work (1.000 = perfect); plan ms = block work + balanced assignment\n");
  return 0;
}
