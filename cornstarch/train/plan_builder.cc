#include "cornstarch/train/plan_builder.h"

#include <torch/torch.h>

#include <algorithm>

#include "cornstarch/dist/runtime.h"
#include "cornstarch/plan/cost_model.h"
#include "cornstarch/train/profiler.h"

namespace cornstarch {

PipelinePlan BuildPipelinePlan(const Config& config, const ModelSpec& spec, DistRuntime& runtime) {
  std::vector<LayerCost> costs = MicrobatchCosts(config, spec);
  if (config.parallel.pp > 1 && config.parallel.pipeline_costs == CostSource::kProfile) {
    torch::Tensor seconds = torch::zeros({static_cast<int64_t>(spec.layers.size())}, torch::kDouble);
    if (runtime.rank() == 0) {
      const std::vector<double> measured = ProfileForwardSeconds(config);
      std::copy(measured.begin(), measured.end(), seconds.data_ptr<double>());
    }
    runtime.world().Broadcast(seconds, 0);
    const double* s = seconds.data_ptr<double>();
    costs = FrozenAwareCosts(spec, std::vector<double>(s, s + seconds.numel()));
  }
  return PlanFromConfig(config, spec, costs);
}

}  // namespace cornstarch
