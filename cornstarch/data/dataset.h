// What the trainer reads batches from, and the dataset a config names.
#pragma once

#include <cstdint>
#include <memory>

#include "cornstarch/plan/config.h"
#include "cornstarch/data/batch.h"

namespace cornstarch {

class Dataset {
 public:
  virtual ~Dataset() = default;
  // Sequences [first, first + count) as one batch. A pure function of the index: any rank can produce any slice
  // of the global batch, and a run resumed at step s reads exactly what it would have read. Thread-safe.
  virtual Batch Get(int64_t first, int64_t count) const = 0;
};

// What a dataset is read for. Training reads `data`; evaluation reads `eval.data` in a fixed order (never
// shuffled), and the synthetic task draws its evaluation samples from a stream of their own.
enum class DataRole { kTrain, kEval };

// The dataset of `role`; its type selects the synthetic task or LLaVA-style conversations.
std::unique_ptr<Dataset> MakeDataset(const Config& config, uint64_t seed, DataRole role = DataRole::kTrain);

}  // namespace cornstarch
