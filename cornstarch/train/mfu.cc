#include "cornstarch/train/mfu.h"

#include <torch/torch.h>

#include "cornstarch/base/logging.h"
#include "cornstarch/data/batch.h"
#include "cornstarch/device/cuda_device.h"
#include "cornstarch/device/torch_runtime.h"
#include "cornstarch/plan/cost_model.h"
#include "cornstarch/plan/tile_mask.h"

namespace cornstarch {

std::vector<InstanceLoad> InstanceLoads(const Batch& batch) {
  std::vector<InstanceLoad> loads(batch.modalities.size());
  for (size_t k = 0; k < batch.modalities.size(); ++k) {
    const ModalityInput& m = batch.modalities[k];
    double instances = static_cast<double>(m.inputs.size(0));
    if (m.grid.defined()) {  // the instances are the images, each with its own tokens and pairs
      const torch::Tensor patches = m.grid.select(1, 0).mul(m.grid.select(1, 1)).to(torch::kDouble);
      instances = static_cast<double>(patches.numel());
      if (patches.numel() > 0) {
        loads[k].tokens = patches.mean().item<double>();
        loads[k].pairs = patches.square().mean().item<double>();
      }
    }
    loads[k].per_sample = instances / static_cast<double>(batch.batch_size());
  }
  return loads;
}

double BatchFlops(const ModelConfig& config, const ModelSpec& spec, const Batch& batch) {
  const int64_t b = batch.batch_size(), s = batch.seq_len();
  const torch::Tensor words = batch.mask_words.contiguous();
  double pairs = 0;
  for (int64_t i = 0; i < b; ++i) pairs += TileMask(words[i].data_ptr<int64_t>(), s, s, s).allowed_pairs();
  const double labelled = batch.labels.ne(-100).sum().item<double>();
  const std::vector<InstanceLoad> loads = InstanceLoads(batch);
  const std::vector<LayerCost> costs =
      FrozenAwareCosts(spec, EstimateForwardFlops(config, spec, s, pairs / b, labelled / b, loads));
  double flops = 0;
  for (size_t l = 0; l < costs.size(); ++l) {
    const int chain = spec.layers[l].chain;
    const double runs = chain == spec.llm_chain() ? b : loads[chain].per_sample * static_cast<double>(b);
    flops += costs[l].total() * runs;
  }
  return flops;
}

MfuMeter::MfuMeter(const LoggingConfig& logging, const c10::Device& device, int world_size, bool reports)
    : world_size_(world_size) {
  const std::string gpu = device.is_cuda() ? CudaDeviceName(device.index()) : "";
  if (logging.peak_tflops > 0) {
    peak_flops_ = logging.peak_tflops * 1e12;
  } else if (device.is_cuda()) {
    peak_flops_ = GpuPeakTflops(gpu) * 1e12;
    if (peak_flops_ == 0 && reports) {
      spdlog::warn("no peak rate known for '{}': MFU is reported as 0; set logging.peak_tflops", gpu);
    }
  } else {
    peak_flops_ = MeasureGemmFlops();
  }
  if (reports && !device.is_cuda()) {
    spdlog::info("MFU peak: {:.0f} GFLOP/s per rank{} ({} threads)", peak_flops_ / 1e9,
                 logging.peak_tflops > 0 ? ", logging.peak_tflops" : ", this rank's fp32 GEMM rate measured now",
                 at::get_num_threads());
  }
  if (reports && device.is_cuda()) {
    spdlog::info("training on {} GPU(s) like rank 0's {} (peak {:.0f} TFLOP/s for MFU)", world_size, gpu,
                 peak_flops_ / 1e12);
  }
}

double MfuMeter::Mfu(double flops, double seconds) const {
  return peak_flops_ > 0 && seconds > 0 ? flops / (seconds * peak_flops_ * world_size_) : 0;
}

}  // namespace cornstarch
