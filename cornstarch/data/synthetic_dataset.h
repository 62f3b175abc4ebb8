// Deterministic synthetic multimodal data (layout in synthetic_layout.h). Sample i is a pure function of
// (seed, i), so any rank can produce any slice of the global batch and a resumed run sees the same data.
//
// Each encoder's input is a class prototype plus Gaussian noise; the answer tokens name the classes, and a joint
// token names their sum modulo num_classes. A model that ignores the modalities cannot do better than guessing
// the first token per encoder: loss >= E * ln(K) / (E + 2) nats per labelled token.
#pragma once

#include <torch/types.h>

#include <vector>

#include "cornstarch/plan/config.h"
#include "cornstarch/data/batch.h"
#include "cornstarch/data/dataset.h"
#include "cornstarch/data/synthetic_layout.h"

namespace cornstarch {

class SyntheticDataset : public Dataset {
 public:
  // `role`: evaluation samples come from their own random stream (the same prototypes, other samples).
  SyntheticDataset(const ModelConfig& model, const DataConfig& data, uint64_t seed, DataRole role = DataRole::kTrain);

  // Samples [first, first + count) as one batch.
  Batch Get(int64_t first, int64_t count) const override;

  const SyntheticLayout& layout() const { return layout_; }

 private:
  ModelConfig model_;
  DataConfig data_;
  uint64_t seed_;
  uint64_t sample_stream_;
  SyntheticLayout layout_;
  std::vector<torch::Tensor> prototypes_;  // per encoder: [num_classes, *input shape]
};

}  // namespace cornstarch
