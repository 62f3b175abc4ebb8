#include "cornstarch/train/plan_builder.h"

#include <torch/torch.h>

#include <algorithm>

#include <spdlog/fmt/fmt.h>

#include "cornstarch/data/dataset.h"
#include "cornstarch/dist/runtime.h"
#include "cornstarch/train/mfu.h"
#include "cornstarch/plan/cost_model.h"
#include "cornstarch/train/profiler.h"

namespace cornstarch {

std::vector<InstanceLoad> FirstStepLoads(const Config& config, const Dataset& data) {
  constexpr int64_t kLoadSamples = 64;  // enough to see what the data holds, few enough to read quickly
  const int64_t local = config.train.global_batch_size / config.parallel.dp;
  return InstanceLoads(data.Get(0, std::min(local, kLoadSamples)));
}

std::string DescribeLoads(const ModelConfig& model, const std::vector<InstanceLoad>& loads) {
  std::string out;
  for (int k = 0; k < static_cast<int>(model.encoders.size()); ++k) {
    const EncoderConfig& e = model.encoders[k];
    const InstanceLoad load = LoadOf(loads, k);
    out += fmt::format("{}{} {:.2f} per sample x {:.1f} tokens", out.empty() ? "" : ", ", e.name, load.Instances(),
                       load.Tokens(e));
  }
  return out.empty() ? "no encoders" : out;
}

namespace {

// Rank 0's FirstStepLoads, the same on every rank.
std::vector<InstanceLoad> DataLoads(const Config& config, DistRuntime& runtime, const Dataset& data) {
  const int64_t encoders = static_cast<int64_t>(config.model.encoders.size());
  torch::Tensor packed = torch::zeros({encoders, 3}, torch::kDouble);
  if (runtime.rank() == 0) {
    const std::vector<InstanceLoad> loads = FirstStepLoads(config, data);
    for (int64_t k = 0; k < encoders; ++k) {
      packed[k][0] = loads[k].tokens, packed[k][1] = loads[k].pairs, packed[k][2] = loads[k].per_sample;
    }
  }
  runtime.world().Broadcast(packed, 0);
  std::vector<InstanceLoad> loads(encoders);
  for (int64_t k = 0; k < encoders; ++k) {
    loads[k] = {packed[k][0].item<double>(), packed[k][1].item<double>(), packed[k][2].item<double>()};
  }
  return loads;
}

}  // namespace

PipelinePlan BuildPipelinePlan(const Config& config, const ModelSpec& spec, DistRuntime& runtime, const Dataset& data) {
  if (config.parallel.pp == 1) return PlanFromConfig(config, spec, MicrobatchCosts(config, spec));
  const std::vector<InstanceLoad> loads = DataLoads(config, runtime, data);
  if (config.parallel.pipeline_costs != CostSource::kProfile) {
    return PlanFromConfig(config, spec, MicrobatchCosts(config, spec, loads));
  }
  torch::Tensor seconds = torch::zeros({static_cast<int64_t>(spec.layers.size())}, torch::kDouble);
  if (runtime.rank() == 0) {
    const std::vector<double> measured = ProfileForwardSeconds(config);
    std::copy(measured.begin(), measured.end(), seconds.data_ptr<double>());
  }
  runtime.world().Broadcast(seconds, 0);
  return PlanFromConfig(
      config, spec,
      ProfiledCosts(config, spec, {seconds.data_ptr<double>(), seconds.data_ptr<double>() + seconds.numel()}, loads));
}

}  // namespace cornstarch
