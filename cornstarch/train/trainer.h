// The training loop, as a sequence of calls to its parts: the plan (train/plan_builder.h), this rank's microbatches
// (train/microbatches.h, data/loader.h), the stage's forwards and backwards in schedule order with gradient
// accumulation (train/executor.h), the gradient sum over dp and cp (train/grad_sync.h), global grad-norm clipping
// and the AdamW step at the scheduled learning rate, then metrics (train/mfu.h, train/step_logger.h) and
// checkpoints (train/checkpointer.h), with a forward-only evaluation on held-out data every eval.interval steps.
// Only rank 0 logs and writes metrics.
#pragma once

#include <c10/core/Device.h>

#include <memory>
#include <string>
#include <vector>

#include "cornstarch/plan/config.h"
#include "cornstarch/train/metrics.h"
#include "cornstarch/train/trace.h"

namespace cornstarch {

class AdamW;
struct Batch;
class BatchLoader;
class Checkpointer;
class Communicator;
class Dataset;
class DistRuntime;
class GradSync;
class MfuMeter;
class MicrobatchSlicer;
class MultimodalModel;
class PipelineExecutor;
struct PipelinePlan;

class Trainer {
 public:
  // Builds model, data and optimizer from a validated config and sets the intra-op thread count. `runtime`
  // (not owned) places this process in the mesh; without it the run is single-process.
  Trainer(const Config& config, DistRuntime& runtime);
  explicit Trainer(const Config& config);
  ~Trainer();

  // Runs the next optimizer step.
  StepMetrics Step();

  // Runs the remaining steps, logging every logging.interval steps, writing the metrics file and saving
  // checkpoints as checkpoint.interval says (and after the last step) when checkpoint.dir is set. After a stop
  // signal (train/stop_signal.h) reached any rank, every rank ends after the same step, with a checkpoint.
  std::vector<StepMetrics> Run();

  // Collective: saves the current state to checkpoint.dir.
  void Save();

  // Collective: the validation loss of the current weights, per labelled token of eval.steps batches of eval.data
  // (always the same batches), forward only under the training layout. REQUIRES: evaluation configured.
  double Evaluate();

  // This process's share of the model: the layers of its pipeline stage.
  MultimodalModel& model() { return *model_; }
  const PipelinePlan& plan() const { return *plan_; }
  const PipelineExecutor& executor() const { return *executor_; }
  const AdamW& optimizer() const { return *optimizer_; }
  const GradSync& grad_sync() const { return *grad_sync_; }
  int64_t step() const { return step_; }

 private:
  // The step's microbatches of this rank (cp-sharded, on the device) and what the step's metrics need of them.
  struct StepData {
    std::vector<Batch> micro;
    double targets = 0, tokens = 0, flops = 0;  // this rank's labelled tokens, non-padding tokens, model FLOPs
  };
  void Init();
  // The end of a run cut short by `signal`: saves the state (when checkpoint.dir is set) and says so.
  void Stop(int signal);
  StepData Prepare(BatchLoader& loader);

  Config config_;
  std::unique_ptr<DistRuntime> own_runtime_;  // set for single-process runs
  DistRuntime& runtime_;
  std::unique_ptr<PipelinePlan> plan_;
  std::unique_ptr<MultimodalModel> model_;
  std::unique_ptr<PipelineExecutor> executor_;
  std::unique_ptr<Dataset> data_;
  std::unique_ptr<Dataset> eval_data_;  // set when evaluation is configured
  std::unique_ptr<MicrobatchSlicer> slicer_;
  std::unique_ptr<BatchLoader> loader_;  // this rank's microbatches from step_ on
  std::unique_ptr<AdamW> optimizer_;
  std::unique_ptr<GradSync> grad_sync_;
  std::vector<bool> tp_split_;  // per trainable parameter: a tensor-parallel slice (its norm adds over tp)
  std::unique_ptr<Communicator> dp_nccl_;  // train.device 'cuda' with dp > 1: the gradient sums
  std::unique_ptr<Communicator> pp_nccl_;  // train.device 'cuda' with pp > 1: activations and their gradients
  std::unique_ptr<Communicator> tp_nccl_;  // train.device 'cuda' with tp > 1: the tensor-parallel collectives
  std::unique_ptr<Checkpointer> checkpointer_;
  std::unique_ptr<MfuMeter> mfu_;
  c10::Device device_{c10::kCPU};  // train.device
  int64_t step_ = 0;
  int64_t resumed_at_ = 0;  // the checkpoint's step, when resumed
  TraceRecorder trace_;
};

}  // namespace cornstarch
