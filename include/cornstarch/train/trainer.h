// The training loop of one process: data -> microbatches -> forward/backward with gradient accumulation ->
// global grad-norm clipping -> AdamW step at the scheduled learning rate -> metrics.
#pragma once

#include <memory>
#include <vector>

#include "cornstarch/config/config.h"
#include "cornstarch/train/metrics.h"

namespace cornstarch {

class AdamW;
class MultimodalModel;
class SyntheticDataset;

class Trainer {
 public:
  // Builds model, data and optimizer from a validated config and sets the intra-op thread count.
  explicit Trainer(const Config& config);
  ~Trainer();

  // Runs the next optimizer step.
  StepMetrics Step();

  // Runs the remaining steps, logging every logging.interval steps and writing the metrics file.
  std::vector<StepMetrics> Run();

  MultimodalModel& model() { return *model_; }
  const AdamW& optimizer() const { return *optimizer_; }
  int64_t step() const { return step_; }

 private:
  Config config_;
  std::unique_ptr<MultimodalModel> model_;
  std::unique_ptr<SyntheticDataset> data_;
  std::unique_ptr<AdamW> optimizer_;
  int64_t step_ = 0;
};

}  // namespace cornstarch
