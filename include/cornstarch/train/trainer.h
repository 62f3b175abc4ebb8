// The training loop: this data-parallel rank's slice of the global batch -> microbatches -> this pipeline stage's
// forwards and backwards in schedule order, with gradient accumulation -> gradient sum over the dp group ->
// global grad-norm clipping -> AdamW step of the stage's parameters at the scheduled learning rate -> metrics
// (logged and written by rank 0 only).
#pragma once

#include <c10/core/Device.h>

#include <memory>
#include <string>
#include <vector>

#include "cornstarch/config/config.h"
#include "cornstarch/train/checkpoint.h"
#include "cornstarch/train/metrics.h"
#include "cornstarch/train/trace.h"

namespace cornstarch {

class AdamW;
struct Batch;
class DistRuntime;
class GradSync;
class MultimodalModel;
class PipelineExecutor;
struct PipelinePlan;
class BatchLoader;
class Communicator;
class Dataset;

class Trainer {
 public:
  // Builds model, data and optimizer from a validated config and sets the intra-op thread count. `runtime`
  // (not owned) places this process in the mesh; without it the run is single-process.
  Trainer(const Config& config, DistRuntime& runtime);
  explicit Trainer(const Config& config);
  ~Trainer();

  // Runs the next optimizer step.
  StepMetrics Step();

  // Model FLOPs of one forward + backward of `batch` as this model executes it: frozen-aware backward (2F
  // trainable, F frozen but passing gradients, 0 otherwise) and LLM attention over the pairs its mask allows.
  double BatchFlops(const Batch& batch) const;

  // Runs the remaining steps, logging every logging.interval steps, writing the metrics file and saving
  // checkpoints as checkpoint.interval says (and after the last step) when checkpoint.dir is set.
  std::vector<StepMetrics> Run();

  // Collective: saves the current state to checkpoint.dir.
  void Save();
  // Collective: writes the model to checkpoint.export_hf in Hugging Face layout (one shard per stage + index).
  void ExportHf();

  // This process's share of the model: the layers of its pipeline stage.
  MultimodalModel& model() { return *model_; }
  const PipelinePlan& plan() const { return *plan_; }
  const PipelineExecutor& executor() const { return *executor_; }
  const AdamW& optimizer() const { return *optimizer_; }
  int64_t step() const { return step_; }

 private:
  void Init();
  // This rank's parameters and optimizer moments under their checkpoint names.
  NamedTensors Shard() const;
  void Restore(const std::string& dir);

  Config config_;
  std::unique_ptr<DistRuntime> own_runtime_;  // set for single-process runs
  DistRuntime& runtime_;
  std::unique_ptr<PipelinePlan> plan_;
  std::unique_ptr<MultimodalModel> model_;
  std::unique_ptr<PipelineExecutor> executor_;
  std::unique_ptr<Dataset> data_;
  std::unique_ptr<BatchLoader> loader_;  // this rank's microbatches from step_ on
  std::unique_ptr<AdamW> optimizer_;
  std::unique_ptr<GradSync> grad_sync_;
  std::unique_ptr<Communicator> dp_nccl_;  // train.device 'cuda' with dp > 1: the gradient sums
  c10::Device device_{c10::kCPU};          // train.device
  double peak_flops_ = 0;  // of one rank, for MFU; 0: unknown (MFU reported as 0)
  int64_t step_ = 0;
  int64_t resumed_at_ = 0;
  TraceRecorder trace_;  // the checkpoint's step, when resumed
};

}  // namespace cornstarch
