// On a machine with a GPU: compares the CUDA bitfield attention (forward and backward) with the CPU kernel on
// random inputs and layouts, then times both. Exits non-zero on a mismatch. Run through tools/gpu_check.sh.
#include <cuda_runtime.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "cornstarch/model/bitfield_attention.h"
#include "cornstarch/plan/bitfield_mask.h"
#include "cornstarch/device/torch_runtime.h"
#include "kernels/bitfield_attention_cuda.h"

using namespace cornstarch;

namespace {

#define CUDA_OK(call)                                                                         \
  do {                                                                                        \
    const cudaError_t e = (call);                                                             \
    if (e != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e)); \
      std::exit(2);                                                                           \
    }                                                                                         \
  } while (0)

template <class T>
T* ToDevice(const torch::Tensor& t) {
  T* ptr = nullptr;
  CUDA_OK(cudaMalloc(&ptr, t.numel() * sizeof(T)));
  CUDA_OK(cudaMemcpy(ptr, t.data_ptr<T>(), t.numel() * sizeof(T), cudaMemcpyHostToDevice));
  return ptr;
}

float* Zeros(const torch::Tensor& like) {
  float* ptr = nullptr;
  CUDA_OK(cudaMalloc(&ptr, like.numel() * sizeof(float)));
  CUDA_OK(cudaMemset(ptr, 0, like.numel() * sizeof(float)));
  return ptr;
}

torch::Tensor ToHost(const float* ptr, const torch::Tensor& like) {
  torch::Tensor out = torch::empty_like(like);
  CUDA_OK(cudaMemcpy(out.data_ptr<float>(), ptr, out.numel() * sizeof(float), cudaMemcpyDeviceToHost));
  return out;
}

double MaxDiff(const torch::Tensor& a, const torch::Tensor& b) {
  const torch::Tensor finite = torch::where(torch::isinf(b), torch::zeros_like(b), b);
  return (torch::where(torch::isinf(a), torch::zeros_like(a), a) - finite).abs().max().item<double>();
}

}  // namespace

int main() {
  ConfigureTorchRuntime(0);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "no CUDA device visible\n");
    return 2;
  }
  std::mt19937 rng(3);
  bool ok = true;
  std::printf("%-7s %5s %4s | %10s %10s %10s %10s | %9s %9s | %9s %9s\n", "layout", "N", "D", "out", "dq", "dk", "dv",
              "cpu f+b s", "gpu f+b ms", "speedup", "");
  for (const auto& [n, d, heads, kv] : std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t>>{
           {97, 64, 4, 2}, {1025, 128, 4, 1}, {4096, 64, 8, 2}, {8192, 128, 8, 2}}) {
    std::vector<MaskSpan> spans = {{kTextToken, 16}, {0, std::min<int64_t>(576, n / 3)}, {1, n / 4}};
    int64_t used = 0;
    for (auto& s : spans) used += s.length;
    spans.push_back({kTextToken, n - used - 3});
    spans.push_back({kPadToken, 3});
    const torch::Tensor words = torch::tensor(BuildMaskWords(spans, 2, rng() % 2)).view({1, n});
    torch::manual_seed(n);
    const torch::Tensor q = torch::randn({1, heads, n, d}), k = torch::randn({1, kv, n, d}),
                        v = torch::randn({1, kv, n, d}), dout = torch::randn({1, heads, n, d});
    const auto cpu_start = std::chrono::steady_clock::now();
    auto [out, lse] = BitfieldAttentionForward(q, k, v, words);
    auto [dq, dk, dv] = BitfieldAttentionBackward(q, k, v, words, out, lse, dout);
    const double cpu_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - cpu_start).count();

    cuda::BitfieldAttentionParams p;
    p.q = ToDevice<float>(q);
    p.k = ToDevice<float>(k);
    p.v = ToDevice<float>(v);
    p.dout = ToDevice<float>(dout);
    p.words = ToDevice<int64_t>(words);
    p.out = Zeros(out);
    p.lse = Zeros(lse);
    p.delta = Zeros(lse);
    p.dq = Zeros(q);
    p.dk = Zeros(k);
    p.dv = Zeros(v);
    p.batch = 1, p.heads = heads, p.kv_heads = kv, p.seq = n, p.dim = d;
    p.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
    cudaEvent_t start, stop;
    CUDA_OK(cudaEventCreate(&start));
    CUDA_OK(cudaEventCreate(&stop));
    CUDA_OK(cuda::LaunchBitfieldAttentionForward(p, nullptr));  // warm-up
    CUDA_OK(cuda::LaunchBitfieldAttentionBackward(p, nullptr));
    CUDA_OK(cudaEventRecord(start));
    CUDA_OK(cuda::LaunchBitfieldAttentionForward(p, nullptr));
    CUDA_OK(cuda::LaunchBitfieldAttentionBackward(p, nullptr));
    CUDA_OK(cudaEventRecord(stop));
    CUDA_OK(cudaEventSynchronize(stop));
    float gpu_ms = 0;
    CUDA_OK(cudaEventElapsedTime(&gpu_ms, start, stop));
    const double e_out = MaxDiff(ToHost(p.out, out), out), e_dq = MaxDiff(ToHost(p.dq, dq), dq),
                 e_dk = MaxDiff(ToHost(p.dk, dk), dk), e_dv = MaxDiff(ToHost(p.dv, dv), dv);
    const bool pass = e_out < 1e-3 && e_dq < 2e-3 && e_dk < 2e-3 && e_dv < 2e-3;
    ok = ok && pass;
    std::printf("%-7s %5lld %4lld | %10.2e %10.2e %10.2e %10.2e | %9.3f %9.3f | %8.1fx %s\n", "mixed",
                static_cast<long long>(n), static_cast<long long>(d), e_out, e_dq, e_dk, e_dv, cpu_s, gpu_ms,
                cpu_s * 1e3 / gpu_ms, pass ? "ok" : "MISMATCH");
    for (const void* ptr : {static_cast<const void*>(p.q), static_cast<const void*>(p.k),
                            static_cast<const void*>(p.v), static_cast<const void*>(p.dout),
                            static_cast<const void*>(p.words), static_cast<const void*>(p.out),
                            static_cast<const void*>(p.lse), static_cast<const void*>(p.delta),
                            static_cast<const void*>(p.dq), static_cast<const void*>(p.dk),
                            static_cast<const void*>(p.dv)}) {
      cudaFree(const_cast<void*>(ptr));
    }
  }
  std::printf("%s (max |gpu - cpu|; tolerance 1e-3 out, 2e-3 gradients)\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
