#include "cornstarch/data/dataset.h"

#include "cornstarch/data/llava_dataset.h"
#include "cornstarch/data/synthetic_dataset.h"

namespace cornstarch {

std::unique_ptr<Dataset> MakeDataset(const Config& config, uint64_t seed) {
  if (config.data.type == DataType::kLlava) return std::make_unique<LlavaDataset>(config, seed);
  return std::make_unique<SyntheticDataset>(config.model, config.data, seed);
}

}  // namespace cornstarch
