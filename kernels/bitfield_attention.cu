// CUDA bitfield attention. Kernels first, then launchers (see bitfield_attention_cuda.h for the contract).
#include <cuda_runtime.h>

#include <cmath>

#include "cornstarch/plan/bitfield_mask.h"
#include "kernels/bitfield_attention_cuda.h"

namespace cornstarch::cuda {

namespace {

// ---- kernels -------------------------------------------------------------------------------------------------

struct Shared {
  float* a;      // [kTileCols, D]: keys (forward, dQ) or scaled queries (dK/dV)
  float* b;      // [kTileCols, D]: values (forward, dQ) or dO (dK/dV)
  int64_t* w;    // [kTileCols] words of the staged rows
  float* lse;    // [kTileCols] (dK/dV)
  float* delta;  // [kTileCols] (dK/dV)
};

__device__ Shared Carve(unsigned char* smem, int64_t dim) {
  Shared s;
  s.a = reinterpret_cast<float*>(smem);
  s.b = s.a + kTileCols * dim;
  s.w = reinterpret_cast<int64_t*>(s.b + kTileCols * dim);
  s.lse = reinterpret_cast<float*>(s.w + kTileCols);
  s.delta = s.lse + kTileCols;
  return s;
}

__device__ float Dot(const float* x, const float* y, int64_t dim) {
  float acc = 0.f;
  for (int64_t d = 0; d < dim; ++d) acc += x[d] * y[d];
  return acc;
}

// Stages the words of keys [j0, j0 + cols) and, if any (row, key) pair of the block is allowed, the keys and values
// into shared memory. Returns false (tile skipped) otherwise. Every thread of the block must call it.
__device__ bool StageKeyTile(const BitfieldAttentionParams& p, const Shared& sh, const float* kb, const float* vb,
                             int64_t b, int64_t j0, int cols, int64_t i, int64_t wi, bool valid) {
  if (threadIdx.x < cols) sh.w[threadIdx.x] = p.words[b * p.seq + j0 + threadIdx.x];
  __syncthreads();
  bool any = false;
  for (int c = 0; valid && c < cols; ++c) any |= MaskAllows(wi, sh.w[c], i, j0 + c);
  if (!__syncthreads_or(any)) return false;  // no pair of this tile is allowed: skip it entirely
  for (int64_t x = threadIdx.x; x < cols * p.dim; x += blockDim.x) {
    sh.a[x] = kb[j0 * p.dim + x];
    sh.b[x] = vb[j0 * p.dim + x];
  }
  __syncthreads();
  return true;
}

template <int DMAX>
__global__ void ForwardKernel(BitfieldAttentionParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  const Shared sh = Carve(smem, p.dim);
  const int64_t D = p.dim, S = p.seq, b = blockIdx.z, h = blockIdx.y, hk = h / (p.heads / p.kv_heads);
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kBlockRows + threadIdx.x;
  const bool valid = i < S;
  const int64_t wi = valid ? p.words[b * S + i] : 0;
  float qr[DMAX], acc[DMAX];
  for (int64_t d = 0; d < D; ++d) {
    qr[d] = valid ? p.q[((b * p.heads + h) * S + i) * D + d] * p.scale : 0.f;
    acc[d] = 0.f;
  }
  float m = -INFINITY, l = 0.f;
  const float* kb = p.k + (b * p.kv_heads + hk) * S * D;
  const float* vb = p.v + (b * p.kv_heads + hk) * S * D;
  for (int64_t j0 = 0; j0 < S; j0 += kTileCols) {
    const int cols = static_cast<int>(min(static_cast<int64_t>(kTileCols), S - j0));
    if (!StageKeyTile(p, sh, kb, vb, b, j0, cols, i, wi, valid)) continue;
    for (int c = 0; valid && c < cols; ++c) {
      if (!MaskAllows(wi, sh.w[c], i, j0 + c)) continue;
      const float s = Dot(qr, sh.a + c * D, D);
      const float m_new = fmaxf(m, s);
      const float correction = __expf(m - m_new), e = __expf(s - m_new);
      l = l * correction + e;
      for (int64_t d = 0; d < D; ++d) acc[d] = acc[d] * correction + e * sh.b[c * D + d];
      m = m_new;
    }
    __syncthreads();
  }
  if (!valid) return;
  float* o = p.out + ((b * p.heads + h) * S + i) * D;
  for (int64_t d = 0; d < D; ++d) o[d] = l > 0.f ? acc[d] / l : 0.f;
  p.lse[(b * p.heads + h) * S + i] = l > 0.f ? m + logf(l) : -INFINITY;
}

__global__ void DeltaKernel(BitfieldAttentionParams p) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= p.batch * p.heads * p.seq) return;
  p.delta[row] = Dot(p.dout + row * p.dim, p.out + row * p.dim, p.dim);
}

template <int DMAX>
__global__ void DqKernel(BitfieldAttentionParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  const Shared sh = Carve(smem, p.dim);
  const int64_t D = p.dim, S = p.seq, b = blockIdx.z, h = blockIdx.y, hk = h / (p.heads / p.kv_heads);
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kBlockRows + threadIdx.x;
  const bool valid = i < S;
  const int64_t row = (b * p.heads + h) * S + i;
  const int64_t wi = valid ? p.words[b * S + i] : 0;
  const float lse = valid ? p.lse[row] : 0.f, delta = valid ? p.delta[row] : 0.f;
  float qr[DMAX], dor[DMAX], dq[DMAX];
  for (int64_t d = 0; d < D; ++d) {
    qr[d] = valid ? p.q[row * D + d] * p.scale : 0.f;
    dor[d] = valid ? p.dout[row * D + d] : 0.f;
    dq[d] = 0.f;
  }
  const float* kb = p.k + (b * p.kv_heads + hk) * S * D;
  const float* vb = p.v + (b * p.kv_heads + hk) * S * D;
  for (int64_t j0 = 0; j0 < S; j0 += kTileCols) {
    const int cols = static_cast<int>(min(static_cast<int64_t>(kTileCols), S - j0));
    if (!StageKeyTile(p, sh, kb, vb, b, j0, cols, i, wi, valid)) continue;
    for (int c = 0; valid && c < cols; ++c) {
      if (!MaskAllows(wi, sh.w[c], i, j0 + c)) continue;
      const float prob = __expf(Dot(qr, sh.a + c * D, D) - lse);
      const float ds = prob * (Dot(dor, sh.b + c * D, D) - delta);
      for (int64_t d = 0; d < D; ++d) dq[d] += ds * sh.a[c * D + d];
    }
    __syncthreads();
  }
  if (!valid) return;
  for (int64_t d = 0; d < D; ++d) p.dq[row * D + d] = dq[d] * p.scale;
}

template <int DMAX>
__global__ void DkvKernel(BitfieldAttentionParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  const Shared sh = Carve(smem, p.dim);
  const int64_t D = p.dim, S = p.seq, b = blockIdx.z, hk = blockIdx.y, group = p.heads / p.kv_heads;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kBlockRows + threadIdx.x;
  const bool valid = j < S;
  const int64_t krow = (b * p.kv_heads + hk) * S + j;
  const int64_t wj = valid ? p.words[b * S + j] : 0;
  float kr[DMAX], vr[DMAX], dk[DMAX], dv[DMAX];
  for (int64_t d = 0; d < D; ++d) {
    kr[d] = valid ? p.k[krow * D + d] : 0.f;
    vr[d] = valid ? p.v[krow * D + d] : 0.f;
    dk[d] = dv[d] = 0.f;
  }
  for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
    const int64_t base = (b * p.heads + h) * S;
    for (int64_t i0 = 0; i0 < S; i0 += kTileCols) {
      const int rows = static_cast<int>(min(static_cast<int64_t>(kTileCols), S - i0));
      if (threadIdx.x < rows) {
        sh.w[threadIdx.x] = p.words[b * S + i0 + threadIdx.x];
        sh.lse[threadIdx.x] = p.lse[base + i0 + threadIdx.x];
        sh.delta[threadIdx.x] = p.delta[base + i0 + threadIdx.x];
      }
      __syncthreads();
      bool any = false;
      for (int r = 0; valid && r < rows; ++r) any |= MaskAllows(sh.w[r], wj, i0 + r, j);
      if (!__syncthreads_or(any)) continue;
      for (int64_t x = threadIdx.x; x < rows * D; x += blockDim.x) {
        sh.a[x] = p.q[(base + i0) * D + x] * p.scale;
        sh.b[x] = p.dout[(base + i0) * D + x];
      }
      __syncthreads();
      for (int r = 0; valid && r < rows; ++r) {
        if (!MaskAllows(sh.w[r], wj, i0 + r, j)) continue;
        const float* qs = sh.a + r * D;
        const float* dor = sh.b + r * D;
        const float prob = __expf(Dot(qs, kr, D) - sh.lse[r]);
        const float ds = prob * (Dot(dor, vr, D) - sh.delta[r]);
        for (int64_t d = 0; d < D; ++d) {
          dv[d] += prob * dor[d];
          dk[d] += ds * qs[d];
        }
      }
      __syncthreads();
    }
  }
  if (!valid) return;
  for (int64_t d = 0; d < D; ++d) {
    p.dk[krow * D + d] = dk[d];
    p.dv[krow * D + d] = dv[d];
  }
}

// ---- launchers -----------------------------------------------------------------------------------------------

dim3 ToDim3(const Dim3& d) { return dim3(d.x, d.y, d.z); }

template <class Kernel>
cudaError_t Launch(Kernel kernel, const LaunchConfig& c, const BitfieldAttentionParams& p, cudaStream_t stream) {
  if (c.shared_bytes > 48 * 1024) {
    const cudaError_t err =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(c.shared_bytes));
    if (err != cudaSuccess) return err;
  }
  kernel<<<ToDim3(c.grid), ToDim3(c.block), c.shared_bytes, stream>>>(p);
  return cudaGetLastError();
}

// Calls f with the kernel instantiation whose register arrays fit p.dim.
template <template <int> class K, class F>
cudaError_t ByDim(int64_t dim, F&& f) {
  if (dim <= 64) return f(K<64>::kernel);
  if (dim <= 128) return f(K<128>::kernel);
  return f(K<256>::kernel);
}

template <int D> struct Forward { static constexpr auto kernel = ForwardKernel<D>; };
template <int D> struct Dq { static constexpr auto kernel = DqKernel<D>; };
template <int D> struct Dkv { static constexpr auto kernel = DkvKernel<D>; };

}  // namespace

cudaError_t LaunchBitfieldAttentionForward(const BitfieldAttentionParams& p, cudaStream_t stream) {
  if (!ValidateParams(p).empty()) return cudaErrorInvalidValue;
  return ByDim<Forward>(p.dim, [&](auto kernel) { return Launch(kernel, ForwardConfig(p), p, stream); });
}

cudaError_t LaunchBitfieldAttentionBackward(const BitfieldAttentionParams& p, cudaStream_t stream) {
  if (!ValidateParams(p).empty()) return cudaErrorInvalidValue;
  const int64_t rows = p.batch * p.heads * p.seq;
  DeltaKernel<<<static_cast<unsigned>((rows + 255) / 256), 256, 0, stream>>>(p);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  err = ByDim<Dq>(p.dim, [&](auto kernel) { return Launch(kernel, DqConfig(p), p, stream); });
  if (err != cudaSuccess) return err;
  return ByDim<Dkv>(p.dim, [&](auto kernel) { return Launch(kernel, DkvConfig(p), p, stream); });
}

}  // namespace cornstarch::cuda
