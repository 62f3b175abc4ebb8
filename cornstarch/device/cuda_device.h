// What the training loop asks of a CUDA device: how many there are, which one this is, how much memory is in use,
// and its peak rate for MFU. Linked on every machine (the CUDA runtime library is part of the build); without a
// GPU or driver the queries answer "none" instead of failing.
#pragma once

#include <string>

namespace cornstarch {

// Visible CUDA devices; 0 without a GPU or driver.
int CudaDeviceCount();

// Makes `device` this thread's current device (cudaSetDevice), where our own kernels launch. Throws Error naming
// the device when it cannot.
void SelectCudaDevice(int device);

// The device's name as the driver reports it ("NVIDIA H100 80GB HBM3"). Throws Error when there is no such device.
std::string CudaDeviceName(int device);

// Memory in use on the device (all processes and LibTorch's cache included), in MiB.
double CudaMemoryUsedMiB(int device);

// Dense BF16 tensor-core TFLOP/s of one GPU (the rate MFU is conventionally quoted against) for a device name as
// CudaDeviceName returns it; 0 for a GPU not in the table. Pure.
double GpuPeakTflops(const std::string& device_name);

}  // namespace cornstarch
