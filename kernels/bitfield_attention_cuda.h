// CUDA bitfield attention (forward, backward): the algorithm of cornstarch/model/bitfield_attention.cc on a GPU.
// Each thread block owns 64 query rows (or key rows for dK/dV), stages key (query) tiles in shared memory, skips
// tiles in which no pair is allowed (a block-wide vote over the bitfield words), and keeps an online softmax in
// fp32. Backward recomputes probabilities from the saved log-sum-exp. All calls are asynchronous on `stream`;
// they return the launch error, if any.
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/bitfield_attention_launch.h"

namespace cornstarch::cuda {

// Writes p.out and p.lse.
cudaError_t LaunchBitfieldAttentionForward(const BitfieldAttentionParams& p, cudaStream_t stream);

// Reads q, k, v, words, out, lse, dout; writes delta (scratch [B, H, S]), dq, dk, dv.
cudaError_t LaunchBitfieldAttentionBackward(const BitfieldAttentionParams& p, cudaStream_t stream);

}  // namespace cornstarch::cuda
