#include "cornstarch/train/profiler.h"

#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>

#include "cornstarch/data/synthetic_dataset.h"
#include "cornstarch/device/autocast.h"
#include "cornstarch/device/torch_runtime.h"
#include "cornstarch/model/multimodal_model.h"

namespace cornstarch {

std::vector<double> ProfileForwardSeconds(const Config& config, int repeats) {
  const auto seed = static_cast<uint64_t>(config.train.seed);
  // Only the shapes matter: synthetic samples of the configured length stand in for any dataset.
  DataConfig shapes = config.data;
  shapes.type = DataType::kSynthetic;
  shapes.num_classes = 2;
  shapes.min_prompt_tokens = shapes.max_prompt_tokens = 0;
  shapes.seq_len = std::max(shapes.seq_len, MakeSyntheticLayout(config.model, shapes).max_length);
  const SyntheticDataset data(config.model, shapes, seed);
  // On the device and in the precision training uses (rank 0 profiles on its GPU 0), synchronised around each run.
  const c10::Device device = TrainingDevice(config.train.device, 0);
  const AutocastGuard autocast(device.type(), {EffectivePrecision(config.train) == Precision::kBf16,
                                               torch::kBFloat16});
  const auto sync = [&] {
    if (device.is_cuda()) torch::cuda::synchronize(device.index());
  };
  const Batch batch = data.Get(0, config.train.micro_batch_size).To(device);
  MultimodalModel tables(config.model, seed, {});  // no layers: only for the RoPE tables
  tables.To(device);
  const ModelSpec& spec = tables.spec();
  ForwardContext ctx = tables.MakeContext(batch);
  ctx.features.resize(spec.llm_chain());
  torch::NoGradGuard no_grad;
  std::vector<double> seconds(spec.layers.size(), 0.0);
  for (int c = 0; c < static_cast<int>(spec.chains.size()); ++c) {
    const bool encoder = c != spec.llm_chain();
    torch::Tensor x = encoder ? batch.modalities[c].inputs : torch::Tensor();
    for (int l = spec.chains[c].begin; l < spec.chains[c].end; ++l) {
      MultimodalModel one(config.model, seed, {l});
      one.To(device);
      torch::Tensor y = one.RunLayer(l, x, ctx);  // warm-up
      double best = 1e300;
      for (int r = 0; r < repeats; ++r) {
        sync();
        const auto start = std::chrono::steady_clock::now();
        y = one.RunLayer(l, x, ctx);
        sync();
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      }
      seconds[l] = best;
      x = y;
    }
    if (encoder) ctx.features[c] = x;
  }
  return seconds;
}

}  // namespace cornstarch
