// What the trainer reads batches from, and the dataset a config names.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "cornstarch/plan/config.h"
#include "cornstarch/data/batch.h"

namespace cornstarch {

class Dataset {
 public:
  virtual ~Dataset() = default;
  // Sequences [first, first + count) as one batch. A pure function of the index: any rank can produce any slice
  // of the global batch, and a run resumed at step s reads exactly what it would have read. Thread-safe.
  virtual Batch Get(int64_t first, int64_t count) const = 0;

  // Datasets read as streams (llava): where this rank's streams stand at the start of step `step`, one list of
  // integers per stream, so that a resumed run continues there without reading what came before. None for a
  // dataset that computes any index directly.
  virtual std::vector<std::vector<int64_t>> StreamStates(int64_t step) const { return {}; }
  // The states of every stream (all ranks' StreamStates in stream order) at the start of step `step`, from a
  // checkpoint. Throws Error when they do not fit this dataset.
  virtual void Resume(int64_t step, const std::vector<std::vector<int64_t>>& states) {}
};

// What a dataset is read for. Training reads `data`; evaluation reads `eval.data` in a fixed order (never
// shuffled), and the synthetic task draws its evaluation samples from a stream of their own.
enum class DataRole { kTrain, kEval };

// Which data-parallel rank reads: streamed datasets read only this rank's streams.
struct DataRank {
  int rank = 0, size = 1;
};

// The dataset of `role`; its type selects the synthetic task or LLaVA-style conversations.
std::unique_ptr<Dataset> MakeDataset(const Config& config, uint64_t seed, DataRole role = DataRole::kTrain,
                                     DataRank dp = {});

}  // namespace cornstarch
