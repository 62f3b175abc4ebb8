#include "cornstarch/device/cuda_device.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <sstream>
#include <vector>

#include "cornstarch/base/check.h"

namespace cornstarch {

int CudaDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return 0;
  return count;
}

void SelectCudaDevice(int device) {
  const cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) throw Error("CUDA device " + std::to_string(device) + ": " + cudaGetErrorString(e));
}

std::string CudaDeviceName(int device) {
  cudaDeviceProp prop;
  const cudaError_t e = cudaGetDeviceProperties(&prop, device);
  if (e != cudaSuccess) throw Error("CUDA device " + std::to_string(device) + ": " + cudaGetErrorString(e));
  return prop.name;
}

double CudaMemoryUsedMiB(int device) {
  int previous = 0;
  size_t free = 0, total = 0;
  if (cudaGetDevice(&previous) != cudaSuccess || cudaSetDevice(device) != cudaSuccess) return 0;
  const bool ok = cudaMemGetInfo(&free, &total) == cudaSuccess;
  cudaSetDevice(previous);
  return ok ? static_cast<double>(total - free) / (1 << 20) : 0;
}

double GpuPeakTflops(const std::string& device_name) {
  // Vendor datasheet figures without sparsity. A qualifier (PCIe, NVL) picks a form factor's lower clocks and
  // power; without one the SXM part is assumed, as "NVIDIA H100 80GB HBM3" is.
  struct Entry {
    const char* model;
    const char* qualifier;
    double tflops;
  };
  static const Entry kTable[] = {
      {"B200", "", 2250}, {"H200", "NVL", 835}, {"H200", "", 989},   {"GH200", "", 989},  {"H100", "PCIe", 756},
      {"H100", "NVL", 835}, {"H100", "", 989}, {"H800", "", 989},    {"A100", "", 312},   {"A800", "", 312},
      {"L40S", "", 362},   {"L40", "", 181},  {"L4", "", 121},      {"A10", "", 125},    {"A6000", "", 155},
      {"4090", "", 165},   {"V100", "", 125},  // V100: FP16 tensor cores (no BF16)
  };
  std::vector<std::string> tokens;
  std::string token;
  std::istringstream in(device_name);
  while (std::getline(in, token, ' ')) {
    std::istringstream parts(token);
    std::string part;
    while (std::getline(parts, part, '-')) tokens.push_back(part);
  }
  const auto has = [&](const std::string& t) { return std::find(tokens.begin(), tokens.end(), t) != tokens.end(); };
  for (const Entry& e : kTable) {
    if (has(e.model) && (e.qualifier[0] == '\0' || has(e.qualifier))) return e.tflops;
  }
  return 0;
}

}  // namespace cornstarch
