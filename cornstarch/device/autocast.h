// Mixed precision: LibTorch's autocast, entered and left through one guard, so the calls that differ between
// LibTorch versions (1.13's per-device setters, 2.4's device-typed ones) live in this file only.
//
// bf16 training keeps fp32 master parameters, gradients and optimizer state; autocast runs the forward's matrix
// products (linear, matmul, convolutions) in bf16 with fp32 accumulation and keeps reductions, norms and the loss
// in fp32, as PyTorch's torch.autocast does. The executor enters it around each forward action only: backward runs
// outside it (autograd replays each op in the dtype its forward used), and recomputation restores the forward's
// state for the layer it re-runs (model/recompute.cc).
#pragma once

#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

namespace cornstarch {

// Autocast's setting on one device type for the calling thread.
struct AutocastState {
  bool enabled = false;
  c10::ScalarType dtype = c10::ScalarType::BFloat16;  // the lower precision it casts to when enabled
};

// The calling thread's autocast setting for `device` (CPU or CUDA).
AutocastState CurrentAutocast(c10::DeviceType device);

// Sets autocast for `device` on this thread to `state` until the guard ends, then restores the previous setting.
// Casts of parameters are cached while any guard is open and dropped when the outermost one closes, so each step
// casts the (updated) weights afresh.
class AutocastGuard {
 public:
  AutocastGuard(c10::DeviceType device, AutocastState state);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  c10::DeviceType device_;
  AutocastState previous_;
};

// Keeps autocast away from the ops of a kernel that computes in fp32 itself (the bitfield attention): without it
// the calling thread would run that kernel's GEMMs in bf16 while its worker threads, which do not inherit autocast,
// ran them in fp32.
class NoAutocastGuard {
 private:
  c10::impl::ExcludeDispatchKeyGuard exclude_;

 public:
  NoAutocastGuard();
};

// fp32 matrix products on CUDA through TF32 tensor cores (10-bit mantissa inputs, fp32 accumulation), as PyTorch
// allows for convolutions by default: what train.precision fp32 uses on GPUs.
void AllowTf32();

}  // namespace cornstarch
