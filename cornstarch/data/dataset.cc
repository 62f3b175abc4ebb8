#include "cornstarch/data/dataset.h"

#include "cornstarch/data/llava_dataset.h"
#include "cornstarch/data/synthetic_dataset.h"

namespace cornstarch {

std::unique_ptr<Dataset> MakeDataset(const Config& config, uint64_t seed, DataRole role, DataRank dp) {
  Config c = config;
  if (role == DataRole::kEval) {
    c.data = config.eval.data;
    c.data.shuffle = false;
  }
  if (c.data.type == DataType::kLlava) return std::make_unique<LlavaDataset>(c, seed, dp);
  return std::make_unique<SyntheticDataset>(c.model, c.data, seed, role);
}

}  // namespace cornstarch
