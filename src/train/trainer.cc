#include "cornstarch/train/trainer.h"

#include <torch/torch.h>

#include <chrono>
#include <cmath>

#include "cornstarch/data/synthetic_dataset.h"
#include "cornstarch/model/multimodal_model.h"
#include "cornstarch/train/adamw.h"
#include "cornstarch/train/lr_schedule.h"
#include "cornstarch/util/check.h"
#include "cornstarch/util/logging.h"
#include "cornstarch/util/torch_runtime.h"

namespace cornstarch {

Trainer::Trainer(const Config& config) : config_(config) {
  ConfigureTorchRuntime(config.train.num_threads);
  const auto seed = static_cast<uint64_t>(config.train.seed);
  model_ = std::make_unique<MultimodalModel>(config.model, seed);
  data_ = std::make_unique<SyntheticDataset>(config.model, config.data, seed);
  optimizer_ = std::make_unique<AdamW>(model_->TrainableParameters(), config.optimizer);
}

Trainer::~Trainer() = default;

StepMetrics Trainer::Step() {
  const auto start = std::chrono::steady_clock::now();
  const TrainConfig& t = config_.train;
  StepMetrics m;
  m.step = step_ + 1;
  m.lr = LearningRate(config_.optimizer, t.steps, step_);

  // Normalise by the labelled tokens of the whole global batch, so accumulation (and later data parallelism)
  // gives the same gradient as one big batch.
  std::vector<Batch> micro;
  int64_t targets = 0;
  for (int64_t first = step_ * t.global_batch_size; micro.size() * t.micro_batch_size < t.global_batch_size;
       first += t.micro_batch_size) {
    micro.push_back(data_->Get(first, t.micro_batch_size));
    targets += micro.back().labels.ne(-100).sum().item<int64_t>();
    m.tokens += micro.back().mask_words.ne(0).sum().item<int64_t>();
  }
  double loss_sum = 0;
  for (const Batch& batch : micro) {
    const torch::Tensor loss = model_->LossSum(batch);
    (loss / static_cast<double>(targets)).backward();
    loss_sum += loss.item<double>();
  }
  m.loss = loss_sum / static_cast<double>(targets);

  const std::vector<torch::Tensor>& params = optimizer_->params();
  m.grad_norm = std::sqrt(SquaredGradNorm(params));
  const double factor = ClipFactor(m.grad_norm, t.grad_clip_norm);
  if (factor < 1.0) ScaleGrads(params, factor);
  optimizer_->Step(m.lr);
  optimizer_->ZeroGrad();

  ++step_;
  m.step_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return m;
}

std::vector<StepMetrics> Trainer::Run() {
  MetricsWriter writer(config_.logging.metrics_path);
  std::vector<StepMetrics> history;
  const auto start = std::chrono::steady_clock::now();
  while (step_ < config_.train.steps) {
    const StepMetrics m = Step();
    writer.Write(m);
    if (m.step == 1 || m.step % config_.logging.interval == 0 || m.step == config_.train.steps) {
      spdlog::info(FormatStepLine(m, config_.train.steps));
    }
    if (!std::isfinite(m.loss)) throw Error("training diverged: loss is " + std::to_string(m.loss) + " at step " +
                                            std::to_string(m.step) + "; lower optimizer.lr");
    history.push_back(m);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!history.empty()) {
    spdlog::info("finished {} steps in {:.1f} s; loss {:.4f} -> {:.4f}", history.size(), seconds,
                 history.front().loss, history.back().loss);
  }
  return history;
}

}  // namespace cornstarch
