// Bitfield attention vs dense masked attention (LibTorch matmul + mask + softmax + matmul) on realistic MLLM
// layouts, side by side in one run. Prints one table row per (layout, N): forward and forward+backward times,
// peak memory above the inputs, the fraction of tiles skipped, and achieved GFLOP/s on the useful work
// (4 * D flops per allowed (i, j) pair and head, forward) next to LibTorch's own GEMM rate measured here.
//
//   bazel run -c opt //bench:attention_bench [-- --sizes 1024,4096,8192,16384 --heads 4 --kv-heads 2 --dim 64]
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
#include "cornstarch/device/torch_runtime.h"
#include "bench/timing.h"

using namespace cornstarch;
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

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> sizes = {1024, 4096, 8192, 16384};
  int64_t heads = 4, kv_heads = 2, dim = 64;
  double dense_limit_gib = 12;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--sizes") {
      sizes.clear();
      for (size_t p = 0; p < value.size();) {
        const size_t comma = value.find(',', p);
        sizes.push_back(std::stoll(value.substr(p, comma - p)));
        p = comma == std::string::npos ? value.size() : comma + 1;
      }
    } else if (flag == "--heads") heads = std::stoll(value);
    else if (flag == "--kv-heads") kv_heads = std::stoll(value);
    else if (flag == "--dim") dim = std::stoll(value);
    else if (flag == "--dense-limit-gib") dense_limit_gib = std::stod(value);
  }
  const int threads = ConfigureTorchRuntime(0);
  const double gemm = MeasureGemmFlops() / 1e9;  // every thread: the machine's GEMM rate
  std::printf("%s; GEMM 1024^3: %.0f GFLOP/s on %d threads\n", DescribeTorchRuntime().c_str(), gemm, threads);
  std::printf("B=1 heads=%lld kv_heads=%lld head_dim=%lld fp32; dense runs with %d BLAS threads, the kernel with %d "
              "intra-op threads\n\n",
              static_cast<long long>(heads), static_cast<long long>(kv_heads), static_cast<long long>(dim), threads,
              threads);
  std::printf("%-18s %6s | %8s %8s %7s | %8s %8s %7s | %6s %6s | %7s %7s | %5s\n", "layout", "N", "bf fwd", "bf f+b",
              "bf MiB", "dn fwd", "dn f+b", "dn MiB", "f+b x", "maskKiB", "skip %", "GF/s", "GF%");
  for (const std::string& layout : bench::MllmLayoutNames()) {
    for (const int64_t n : sizes) {
      const torch::Tensor words = torch::tensor(BuildMaskWords(bench::MllmLayout(layout, n), 2)).view({1, n});
      torch::manual_seed(0);
      const torch::Tensor q = torch::randn({1, heads, n, dim}), k = torch::randn({1, kv_heads, n, dim}),
                          v = torch::randn({1, kv_heads, n, dim}), dout = torch::randn({1, heads, n, dim});
      BitfieldAttentionStats stats;
      double bf_fwd = 0, bf_fb = 0, dn_fwd = 0, dn_fb = 0;
      const double bf_mem = PeakMiB([&] {
        bf_fwd = Seconds([&] { BitfieldAttentionForward(q, k, v, words, {}, &stats); });
        bf_fb = Seconds([&] {
          torch::Tensor qq = q.clone().requires_grad_(true), kk = k.clone().requires_grad_(true),
                        vv = v.clone().requires_grad_(true);
          BitfieldAttention(qq, kk, vv, words).backward(dout);
        });
      });
      // The dense baseline holds several [heads, N, N] fp32 tensors at once (scores, probs, mask, grads).
      const double dense_gib = 6.0 * heads * n * n * 4 / (1 << 30);
      double dn_mem = -1;
      if (dense_gib <= dense_limit_gib) {
        SetBlasThreads(threads);
        dn_mem = PeakMiB([&] {
          dn_fwd = Seconds([&] { DenseAttention(q, k, v, DenseMaskFromWords(words)); });
          dn_fb = Seconds([&] {
            torch::Tensor qq = q.clone().requires_grad_(true), kk = k.clone().requires_grad_(true),
                          vv = v.clone().requires_grad_(true);
            DenseAttention(qq, kk, vv, DenseMaskFromWords(words)).backward(dout);
          });
        });
        SetBlasThreads(1);
      }
      const double skipped = 100.0 * (1.0 - static_cast<double>(stats.tiles_computed) / stats.tiles_total);
      const double words_kib = 8.0 * n / 1024;  // the kernel's whole mask: one int64 per token
      const double gflops = 4.0 * dim * stats.allowed_pairs / bf_fwd / 1e9;
      if (dn_mem >= 0) {
        std::printf("%-18s %6lld | %8.3f %8.3f %7.0f | %8.3f %8.3f %7.0f | %6.2f %7.0f | %7.1f %7.1f | %5.0f\n",
                    layout.c_str(), static_cast<long long>(n), bf_fwd, bf_fb, bf_mem, dn_fwd, dn_fb, dn_mem,
                    dn_fb / bf_fb, words_kib, skipped, gflops,
                    100.0 * gflops / gemm);
      } else {
        std::printf("%-18s %6lld | %8.3f %8.3f %7.0f | %26s | %6s %7.0f | %7.1f %7.1f | %5.0f\n", layout.c_str(),
                    static_cast<long long>(n), bf_fwd, bf_fb, bf_mem, "dense skipped (too large)", "-", words_kib,
                    skipped, gflops, 100.0 * gflops / gemm);
      }
      std::fflush(stdout);
    }
  }
  std::printf("\nbf = bitfield kernel, dn = dense; times in s; MiB = peak RSS above the inputs; f+b x = dense/bf "
              "fwd+bwd time; maskKiB = the kernel's mask (8 bytes per token; the dense path materialises N x N); skip %% = tiles skipped; GF/s = useful fwd GFLOP/s of the kernel; GF%% = of the GEMM rate\n");
  return 0;
}
