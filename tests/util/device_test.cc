// The device-side choices that can be checked without a GPU: the peak-rate table behind MFU on GPUs, the device
// queries and train.device's errors on a machine without one, moving a batch keeps every tensor, and the CPU kernels'
// task runner.
#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "cornstarch/plan/config.h"
#include "cornstarch/data/batch.h"
#include "cornstarch/train/trainer.h"
#include "cornstarch/base/check.h"
#include "cornstarch/device/cpu_tasks.h"
#include "cornstarch/device/cuda_device.h"
#include "cornstarch/device/torch_runtime.h"
#include "tests/error_of.h"

using namespace cornstarch;
using cornstarch::testing::ErrorOf;
using Catch::Matchers::Contains;

TEST_CASE("GPU names as the driver reports them map to their dense BF16 peak", "[device]") {
  // Values from the vendors' datasheets (dense, no sparsity).
  CHECK(GpuPeakTflops("NVIDIA H100 80GB HBM3") == 989);
  CHECK(GpuPeakTflops("NVIDIA H100 PCIe") == 756);
  CHECK(GpuPeakTflops("NVIDIA H100 NVL") == 835);
  CHECK(GpuPeakTflops("NVIDIA H200") == 989);
  CHECK(GpuPeakTflops("NVIDIA A100-SXM4-80GB") == 312);
  CHECK(GpuPeakTflops("NVIDIA A100 80GB PCIe") == 312);
  CHECK(GpuPeakTflops("NVIDIA L40S") == 362);
  CHECK(GpuPeakTflops("NVIDIA L40") == 181);
  CHECK(GpuPeakTflops("NVIDIA L4") == 121);
  CHECK(GpuPeakTflops("NVIDIA A10") == 125);
  CHECK(GpuPeakTflops("NVIDIA B200") == 2250);
  CHECK(GpuPeakTflops("NVIDIA GeForce RTX 4090") == 165);
  CHECK(GpuPeakTflops("Tesla V100-SXM2-32GB") == 125);
  // Whole tokens only: an unknown part is 0 (MFU off, a warning), never a near namesake's rate.
  CHECK(GpuPeakTflops("NVIDIA A10G") == 0);
  CHECK(GpuPeakTflops("NVIDIA L40X") == 0);
  CHECK(GpuPeakTflops("") == 0);
}

TEST_CASE("without a GPU the device queries answer none, and train.device cuda is a clear error", "[device]") {
  if (CudaDeviceCount() > 0) {
    WARN("this machine has a GPU: the no-GPU answers are not checked");
    return;
  }
  CHECK_THAT(ErrorOf([] { CudaDeviceName(0); }), Contains("CUDA device 0: "));
  CHECK(CudaMemoryUsedMiB(0) == 0);
  CHECK(TrainingDevice(DeviceType::kCpu, 3) == c10::Device(c10::kCPU));
  CHECK_THAT(ErrorOf([] { TrainingDevice(DeviceType::kCuda, 0); }),
             Contains("train.device: 'cuda' needs a CUDA build of LibTorch and a visible GPU"));
  const Config cfg = ParseConfig("", "gpu.yaml", {"train.device=cuda", "model.encoders.vision.type=vision"});
  CHECK_THAT(ErrorOf([&] { Trainer t(cfg); }), Contains("train.device: 'cuda' needs a CUDA build"));
}

TEST_CASE("a batch moved to a device keeps every tensor", "[device]") {
  Batch b;
  b.input_ids = torch::arange(6).view({2, 3});
  b.labels = torch::full({2, 3}, -100, torch::kLong);
  b.positions = torch::arange(3).repeat({2, 1});
  b.mask_words = torch::ones({2, 3}, torch::kLong);
  b.modalities.push_back({torch::randn({1, 3, 4, 4}), torch::tensor({1, 2}), torch::Tensor()});
  b.modalities.push_back({torch::randn({2, 5, 6}), torch::tensor({4, 5}), torch::tensor({0, 3})});
  const Batch m = b.To(c10::Device(c10::kCPU));
  CHECK(torch::equal(m.input_ids, b.input_ids));
  CHECK(torch::equal(m.labels, b.labels));
  CHECK(torch::equal(m.positions, b.positions));
  CHECK(torch::equal(m.mask_words, b.mask_words));
  REQUIRE(m.modalities.size() == 2);
  for (size_t i = 0; i < 2; ++i) {
    CHECK(torch::equal(m.modalities[i].inputs, b.modalities[i].inputs));
    CHECK(torch::equal(m.modalities[i].positions, b.modalities[i].positions));
    CHECK(m.modalities[i].rows.defined() == b.modalities[i].rows.defined());
  }
  CHECK(torch::equal(m.modalities[1].rows, b.modalities[1].rows));
}

TEST_CASE("CPU tasks run once each, concurrently, on one OpenMP thread each, and pass failures on", "[device]") {
  at::set_num_threads(2);
  std::vector<std::atomic<int>> runs(1000);
  std::atomic<int> started{0};
  std::atomic<bool> concurrent{true}, single_threaded{true};
  ParallelTasks(1000, [&](int64_t i) {
    ++runs[i];
    single_threaded = single_threaded && at::get_num_threads() == 1;
    if (i < 2) {  // tasks 0 and 1 wait for each other: only two threads at once can finish both promptly
      ++started;
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (started < 2 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
      concurrent = concurrent && started == 2;
    }
  });
  for (const auto& r : runs) REQUIRE(r == 1);
  CHECK(concurrent);
  CHECK(single_threaded);
  CHECK(at::get_num_threads() == 2);  // the caller's count is back

  bool grad_in_task = true;
  {
    torch::NoGradGuard no_grad;
    ParallelTasks(1, [&](int64_t) { grad_in_task = c10::GradMode::is_enabled(); });
  }
  CHECK_FALSE(grad_in_task);

  std::atomic<int> after_failure{0};
  CHECK_THAT(ErrorOf([&] {
               ParallelTasks(100, [&](int64_t i) {
                 if (i == 3) throw Error("task 3 failed");
                 if (i > 50) ++after_failure;
               });
             }),
             Contains("task 3 failed"));
  CHECK(after_failure < 50);  // tasks not yet started when it failed did not run

  // Inside a parallel region the region's threads already share the work: the tasks run on the calling thread.
  std::vector<std::thread::id> ids;
  std::mutex ids_mutex;
  at::parallel_for(0, 1, 1, [&](int64_t, int64_t) {
    ParallelTasks(8, [&](int64_t) {
      const std::lock_guard<std::mutex> lock(ids_mutex);
      ids.push_back(std::this_thread::get_id());
    });
  });
  for (const auto& id : ids) CHECK(id == ids.front());
}
