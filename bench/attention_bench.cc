// Bitfield attention vs dense masked attention (LibTorch matmul + mask + softmax + matmul) on realistic MLLM
// layouts, side by side in one run. Prints one table row per (layout, N): forward and forward+backward times (the
// median of --reps runs after one warm-up), peak memory above the inputs, the fraction of tiles skipped, and the
// achieved GFLOP/s on the useful work (4 * D flops per allowed (i, j) pair and head forward, 8 * D more backward,
// the count of model FLOPs, recomputation not counted) next to LibTorch's own GEMM rate measured here.
//
//   bazel run -c opt //bench:attention_bench [-- --sizes 1024,4096,8192,16384 --batch 1 --heads 4 --kv-heads 2
//       --dim 64 --reps 3 --tile-q 64 --tile-k 64 --chunk 1024 --threads 0 (every core)]
// W1's shape (bench/vs_pytorch.sh): --sizes 1024 --batch 4 --heads 8 --kv-heads 4.
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "cornstarch/model/bitfield_attention.h"
#include "bench/mllm_layouts.h"
#include "cornstarch/plan/bitfield_mask.h"
#include "cornstarch/model/dense_attention.h"
#include "cornstarch/device/cpu_tasks.h"
#include "cornstarch/device/torch_runtime.h"
#include "bench/timing.h"

using namespace cornstarch;
using cornstarch::bench::Median;
using cornstarch::bench::Seconds;

namespace {

// Peak resident memory (MiB) of `f` above the resident memory before it (Linux: clear_refs resets VmHWM).
double PeakMiB(const std::function<void()>& f) {
  auto read = [](const char* key) {
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line)) {
      if (line.rfind(key, 0) == 0) return std::stod(line.substr(std::string(key).size())) / 1024.0;
    }
    return 0.0;
  };
  std::ofstream("/proc/self/clear_refs") << "5";
  const double before = read("VmRSS:");
  f();
  return read("VmHWM:") - before;
}

// The median seconds of `reps` runs of `f` after one warm-up run.
double MedianSeconds(int reps, const std::function<void()>& f) {
  f();
  std::vector<double> runs;
  for (int r = 0; r < reps; ++r) runs.push_back(Seconds(f));
  return Median(runs);
}

// GFLOP/s of `threads` threads each running its own [rows x dim] x [dim x keys] product at once, the shape of the
// kernel's score GEMM (grouped rows of one query tile against a piece of keys): the kernel's ceiling on this
// machine, which a single large GEMM spread over the threads (the GEMM rate) may exceed by far.
double ConcurrentTileGemmRate(int threads, int64_t rows, int64_t dim, int64_t keys) {
  constexpr int64_t kReps = 200;
  const int saved = at::get_num_threads();
  at::set_num_threads(threads);
  const double seconds = MedianSeconds(3, [&] {
    ParallelTasks(threads, [&](int64_t) {
      const torch::Tensor a = torch::randn({rows, dim}), b = torch::randn({dim, keys});
      torch::Tensor c = torch::empty({rows, keys});
      for (int64_t r = 0; r < kReps; ++r) torch::mm_out(c, a, b);
    });
  });
  at::set_num_threads(saved);
  return 2.0 * rows * dim * keys * kReps * threads / seconds / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> sizes = {1024, 4096, 8192, 16384};
  int64_t batch = 1, heads = 4, kv_heads = 2, dim = 64;
  int reps = 3, threads = 0;
  double dense_limit_gib = 12;
  BitfieldAttentionOptions options;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--sizes") {
      sizes.clear();
      for (size_t p = 0; p < value.size();) {
        const size_t comma = value.find(',', p);
        sizes.push_back(std::stoll(value.substr(p, comma - p)));
        p = comma == std::string::npos ? value.size() : comma + 1;
      }
    } else if (flag == "--batch") batch = std::stoll(value);
    else if (flag == "--heads") heads = std::stoll(value);
    else if (flag == "--kv-heads") kv_heads = std::stoll(value);
    else if (flag == "--dim") dim = std::stoll(value);
    else if (flag == "--reps") reps = std::stoi(value);
    else if (flag == "--threads") threads = std::stoi(value);
    else if (flag == "--tile-q") options.tile_q = std::stoll(value);
    else if (flag == "--tile-k") options.tile_k = std::stoll(value);
    else if (flag == "--chunk") options.chunk = std::stoll(value);
    else if (flag == "--dense-limit-gib") dense_limit_gib = std::stod(value);
  }
  threads = ConfigureTorchRuntime(threads);
  const double gemm = MeasureGemmFlops() / 1e9;  // every thread: the machine's GEMM rate
  std::printf("%s; GEMM rate %.0f GFLOP/s on %d threads\n", DescribeTorchRuntime().c_str(), gemm, threads);
  const int64_t rows = heads / kv_heads * options.tile_q;
  std::printf("score-tile GEMMs ([%lld x %lld] x [%lld x %lld], one per thread at once): %.0f GFLOP/s on 1 thread, "
              "%.0f on %d\n", static_cast<long long>(rows), static_cast<long long>(dim), static_cast<long long>(dim),
              static_cast<long long>(options.chunk), ConcurrentTileGemmRate(1, rows, dim, options.chunk),
              ConcurrentTileGemmRate(threads, rows, dim, options.chunk), threads);
  std::printf("B=%lld heads=%lld kv_heads=%lld head_dim=%lld fp32, tiles %lldx%lld, chunk %lld, median of %d; dense "
              "runs with %d BLAS threads, the kernel with %d intra-op threads\n\n",
              static_cast<long long>(batch), static_cast<long long>(heads), static_cast<long long>(kv_heads),
              static_cast<long long>(dim), static_cast<long long>(options.tile_q),
              static_cast<long long>(options.tile_k), static_cast<long long>(options.chunk), reps, threads, threads);
  std::printf("%-18s %6s | %8s %8s %7s | %8s %8s %7s | %6s %6s | %6s %6s | %6s %6s | %5s %5s\n", "layout", "N",
              "bf fwd", "bf f+b", "bf MiB", "dn fwd", "dn f+b", "dn MiB", "f+b x", "maskKiB", "skip %", "used %",
              "GF/s", "f+b", "GF%", "f+b");
  for (const std::string& layout : bench::MllmLayoutNames()) {
    for (const int64_t n : sizes) {
      const torch::Tensor words =
          torch::tensor(BuildMaskWords(bench::MllmLayout(layout, n), 2)).view({1, n}).expand({batch, n}).contiguous();
      torch::manual_seed(0);
      const torch::Tensor q = torch::randn({batch, heads, n, dim}), k = torch::randn({batch, kv_heads, n, dim}),
                          v = torch::randn({batch, kv_heads, n, dim}), dout = torch::randn({batch, heads, n, dim});
      BitfieldAttentionStats stats;
      BitfieldAttentionForward(q, k, v, words, options, &stats);
      double bf_fwd = 0, bf_fb = 0, dn_fwd = 0, dn_fb = 0;
      const double bf_mem = PeakMiB([&] {
        bf_fwd = MedianSeconds(reps, [&] { BitfieldAttentionForward(q, k, v, words, options); });
        bf_fb = MedianSeconds(reps, [&] {
          const auto [out, lse] = BitfieldAttentionForward(q, k, v, words, options);
          BitfieldAttentionBackward(q, k, v, words, out, lse, dout, options);
        });
      });
      // The dense baseline holds several [heads, N, N] fp32 tensors at once (scores, probs, mask, grads).
      const double dense_gib = 6.0 * batch * heads * n * n * 4 / (1 << 30);
      double dn_mem = -1;
      if (dense_gib <= dense_limit_gib) {
        SetBlasThreads(threads);
        const torch::Tensor mask = DenseMaskFromWords(words);
        dn_mem = PeakMiB([&] {
          dn_fwd = MedianSeconds(reps, [&] { DenseAttention(q, k, v, mask); });
          dn_fb = MedianSeconds(reps, [&] {
            torch::Tensor qq = q.clone().requires_grad_(true), kk = k.clone().requires_grad_(true),
                          vv = v.clone().requires_grad_(true);
            DenseAttention(qq, kk, vv, mask).backward(dout);
          });
        });
        SetBlasThreads(1);
      }
      const double skipped = 100.0 * (1.0 - static_cast<double>(stats.tiles_computed) / stats.tiles_total);
      const double used = 100.0 * static_cast<double>(stats.allowed_pairs) / stats.pairs_computed;
      const double words_kib = 8.0 * batch * n / 1024;  // the kernel's whole mask: one int64 per token
      const double gf_fwd = 4.0 * dim * stats.allowed_pairs / bf_fwd / 1e9;
      const double gf_fb = 12.0 * dim * stats.allowed_pairs / bf_fb / 1e9;
      char dense[64];
      if (dn_mem >= 0) {
        std::snprintf(dense, sizeof dense, "%8.3f %8.3f %7.0f | %6.2f", dn_fwd, dn_fb, dn_mem, dn_fb / bf_fb);
      } else {
        std::snprintf(dense, sizeof dense, "%26s | %6s", "dense skipped (too large)", "-");
      }
      std::printf("%-18s %6lld | %8.3f %8.3f %7.0f | %s %7.0f | %6.1f %6.1f | %6.1f %6.1f | %5.0f %5.0f\n",
                  layout.c_str(), static_cast<long long>(n), bf_fwd, bf_fb, bf_mem, dense, words_kib, skipped, used,
                  gf_fwd, gf_fb,
                  100.0 * gf_fwd / gemm, 100.0 * gf_fb / gemm);
      std::fflush(stdout);
    }
  }
  std::printf("\nbf = bitfield kernel, dn = dense; times in s; MiB = peak RSS above the inputs; f+b x = dense/bf "
              "fwd+bwd time; maskKiB = the kernel's mask (8 bytes per token; the dense path materialises N x N); "
              "skip %% = tiles skipped; used %% = allowed of the scores the forward computed; GF/s = useful "
              "GFLOP/s of the kernel, forward and forward+backward; GF%% = of the GEMM rate\n");
  return 0;
}
