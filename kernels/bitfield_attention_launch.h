// Launch parameters and launch configuration of the CUDA bitfield attention kernels. Plain C++ (no CUDA types), so
// the host-side logic is unit-tested on machines without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace cornstarch::cuda {

// Contiguous fp32 tensors: q, out, dout [B, H, S, D]; k, v [B, Hkv, S, D]; lse, delta [B, H, S]; words [B, S].
struct BitfieldAttentionParams {
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  const int64_t* words = nullptr;
  float* out = nullptr;
  float* lse = nullptr;
  // Backward only.
  const float* dout = nullptr;
  float* delta = nullptr;
  float* dq = nullptr;
  float* dk = nullptr;
  float* dv = nullptr;
  int64_t batch = 0, heads = 0, kv_heads = 0, seq = 0, dim = 0;
  float scale = 1.0f;
};

constexpr int kBlockRows = 64;   // query rows (forward, dQ) or key rows (dK/dV) per thread block, one per thread
constexpr int kTileCols = 32;    // keys (or queries) staged in shared memory per step
constexpr int kMaxHeadDim = 256;  // per-thread accumulators live in registers/local memory

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

struct LaunchConfig {
  Dim3 grid, block;
  size_t shared_bytes = 0;
};

// Returns an empty string when the parameters can be launched, else what is wrong.
inline std::string ValidateParams(const BitfieldAttentionParams& p) {
  if (p.batch < 1 || p.heads < 1 || p.kv_heads < 1 || p.seq < 1 || p.dim < 1) return "empty or negative shape";
  if (p.heads % p.kv_heads != 0) return "heads must be a multiple of kv_heads";
  if (p.dim > kMaxHeadDim) return "head_dim above " + std::to_string(kMaxHeadDim);
  if (p.batch > 65535 || p.heads > 65535) return "batch and heads must fit a grid dimension (65535)";
  return "";
}

// One block per (row block, head, batch); one thread per row; two staged [kTileCols, D] tiles (K and V, or Q and
// dO) plus their words in shared memory.
inline LaunchConfig RowKernelConfig(const BitfieldAttentionParams& p, int64_t heads) {
  LaunchConfig c;
  c.grid.x = static_cast<unsigned>((p.seq + kBlockRows - 1) / kBlockRows);
  c.grid.y = static_cast<unsigned>(heads);
  c.grid.z = static_cast<unsigned>(p.batch);
  c.block.x = kBlockRows;
  c.shared_bytes = 2 * kTileCols * p.dim * sizeof(float) + kTileCols * (sizeof(int64_t) + 2 * sizeof(float));
  return c;
}

inline LaunchConfig ForwardConfig(const BitfieldAttentionParams& p) { return RowKernelConfig(p, p.heads); }
inline LaunchConfig DqConfig(const BitfieldAttentionParams& p) { return RowKernelConfig(p, p.heads); }
// dK/dV: blocks over key rows of each kv head; the query heads of the group are looped inside.
inline LaunchConfig DkvConfig(const BitfieldAttentionParams& p) { return RowKernelConfig(p, p.kv_heads); }

}  // namespace cornstarch::cuda
