#include "cornstarch/device/autocast.h"

#include <ATen/Context.h>
#include <ATen/autocast_mode.h>
#include <torch/version.h>

#include "cornstarch/base/check.h"

namespace cornstarch {

namespace {

// LibTorch 2.4 made the setters device-typed and deprecated the per-device names that 1.13 has.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define CS_DEVICE_TYPED_AUTOCAST 1
#endif

void CheckDevice(c10::DeviceType device) {
  CS_CHECK(device == c10::DeviceType::CPU || device == c10::DeviceType::CUDA, "autocast on ", device);
}

void Apply(c10::DeviceType device, AutocastState state) {
#ifdef CS_DEVICE_TYPED_AUTOCAST
  at::autocast::set_autocast_enabled(device, state.enabled);
  at::autocast::set_autocast_dtype(device, state.dtype);
#else
  if (device == c10::DeviceType::CUDA) {
    at::autocast::set_enabled(state.enabled);
    at::autocast::set_autocast_gpu_dtype(state.dtype);
  } else {
    at::autocast::set_cpu_enabled(state.enabled);
    at::autocast::set_autocast_cpu_dtype(state.dtype);
  }
#endif
}

}  // namespace

AutocastState CurrentAutocast(c10::DeviceType device) {
  CheckDevice(device);
#ifdef CS_DEVICE_TYPED_AUTOCAST
  return {at::autocast::is_autocast_enabled(device), at::autocast::get_autocast_dtype(device)};
#else
  if (device == c10::DeviceType::CUDA) return {at::autocast::is_enabled(), at::autocast::get_autocast_gpu_dtype()};
  return {at::autocast::is_cpu_enabled(), at::autocast::get_autocast_cpu_dtype()};
#endif
}

AutocastGuard::AutocastGuard(c10::DeviceType device, AutocastState state)
    : device_(device), previous_(CurrentAutocast(device)) {
  Apply(device, state);
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  Apply(device_, previous_);
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
}

NoAutocastGuard::NoAutocastGuard() : exclude_(c10::autocast_dispatch_keyset) {}

void AllowTf32() {
  at::globalContext().setAllowTF32CuBLAS(true);
  at::globalContext().setAllowTF32CuDNN(true);
}

}  // namespace cornstarch
