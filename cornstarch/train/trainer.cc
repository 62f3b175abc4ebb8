#include "cornstarch/train/trainer.h"

#include <torch/torch.h>

#include <chrono>
#include <cmath>

#include "cornstarch/base/check.h"
#include "cornstarch/base/logging.h"
#include "cornstarch/data/dataset.h"
#include "cornstarch/data/loader.h"
#include "cornstarch/data/synthetic_layout.h"
#include "cornstarch/device/autocast.h"
#include "cornstarch/device/cuda_device.h"
#include "cornstarch/device/profile_scopes.h"
#include "cornstarch/device/torch_runtime.h"
#include "cornstarch/dist/nccl_communicator.h"
#include "cornstarch/dist/runtime.h"
#include "cornstarch/io/hf_weights.h"
#include "cornstarch/model/multimodal_model.h"
#include "cornstarch/plan/lr_schedule.h"
#include "cornstarch/train/adamw.h"
#include "cornstarch/train/checkpointer.h"
#include "cornstarch/train/executor.h"
#include "cornstarch/train/grad_sync.h"
#include "cornstarch/train/mfu.h"
#include "cornstarch/train/microbatches.h"
#include "cornstarch/train/plan_builder.h"
#include "cornstarch/train/step_logger.h"
#include "cornstarch/train/stop_signal.h"

namespace cornstarch {

namespace {

std::unique_ptr<DistRuntime> SingleProcessRuntime(const Config& config) {
  return std::make_unique<DistRuntime>(config.parallel, LaunchEnv{}, nullptr, nullptr);
}

double ReduceOver(Communicator& group, double value, ReduceOp op) {
  torch::Tensor t = torch::full({1}, value, torch::kDouble);
  group.AllReduce(t, op);
  return t.item<double>();
}

double SumOver(Communicator& group, double value) { return ReduceOver(group, value, ReduceOp::kSum); }

}  // namespace

Trainer::Trainer(const Config& config)
    : config_(config), own_runtime_(SingleProcessRuntime(config)), runtime_(*own_runtime_) {
  Init();
}

Trainer::Trainer(const Config& config, DistRuntime& runtime) : config_(config), runtime_(runtime) { Init(); }

Trainer::~Trainer() = default;

void Trainer::Init() {
  const Config& config = config_;
  ValidateSyntheticData(config);
  ConfigureTorchRuntime(config.train.num_threads, runtime_.env().local_world_size);
  const ModelSpec spec = BuildModelSpec(config.model);
  Communicator& dp = runtime_.group(Axis::kDP);
  const DataRank data_rank{dp.rank(), dp.size()};
  data_ = MakeDataset(config, static_cast<uint64_t>(config.train.seed), DataRole::kTrain, data_rank);
  if (config.eval.enabled()) {
    eval_data_ = MakeDataset(config, static_cast<uint64_t>(config.train.seed), DataRole::kEval, data_rank);
  }
  plan_ = std::make_unique<PipelinePlan>(BuildPipelinePlan(config, spec, runtime_, *data_));
  const int pp_rank = runtime_.coord().pp;
  Communicator& tp = runtime_.group(Axis::kTP);
  const TpShard tp_shard{tp.rank(), tp.size(), config.parallel.sequence_parallel && tp.size() > 1};
  model_ = std::make_unique<MultimodalModel>(config.model, config.train.seed, LayersOfRank(*plan_, pp_rank), tp_shard);
  for (int c = 0; c < static_cast<int>(spec.chains.size()); ++c) {
    const ModelConfig& m = config.model;
    if (!(c == spec.llm_chain() ? m.llm.weights : m.encoders[c].weights).empty()) LoadHfWeights(*model_, c);
  }
  // Initialised and loaded on the host (so a GPU run starts from the CPU run's exact weights), then moved.
  device_ = TrainingDevice(config.train.device, runtime_.env().local_rank);
  model_->To(device_);
  if (device_.is_cuda() && dp.size() > 1) {
    dp_nccl_ = MakeNcclCommunicator(dp, device_.index(), config.parallel.timeout_seconds, "dp");
  }
  Communicator& pp = runtime_.group(Axis::kPP);
  if (device_.is_cuda() && pp.size() > 1) {
    pp_nccl_ = MakeNcclCommunicator(pp, device_.index(), config.parallel.timeout_seconds, "pp");
  }
  if (device_.is_cuda() && tp.size() > 1) {
    tp_nccl_ = MakeNcclCommunicator(tp, device_.index(), config.parallel.timeout_seconds, "tp");
  }
  Communicator* tp_group = tp.size() > 1 ? (tp_nccl_ ? tp_nccl_.get() : &tp) : nullptr;
  const Precision precision = EffectivePrecision(config.train);
  if (device_.is_cuda() && precision == Precision::kFp32) AllowTf32();
  executor_ = std::make_unique<PipelineExecutor>(*model_, *plan_, pp_rank, pp_nccl_ ? *pp_nccl_ : pp,
                                                 runtime_.group(Axis::kCP), tp_group, precision);
  // With dp = 1 there is nothing to shard over.
  const bool shard = config.optimizer.shard && dp.size() > 1;
  const auto bucket_bytes = static_cast<int64_t>(config.parallel.grad_bucket_mib * (1 << 20));
  grad_sync_ = std::make_unique<GradSync>(model_->TrainableParameters(), bucket_bytes, dp_nccl_ ? *dp_nccl_ : dp,
                                          runtime_.group(Axis::kCP), shard, config.parallel.overlap_grad_sync,
                                          config.parallel.grad_reduce_dtype == FloatType::kBf16);
  optimizer_ = std::make_unique<AdamW>(model_->TrainableParameters(), grad_sync_->slices(), config.optimizer);
  if (tp.size() > 1) {
    const auto named = model_->NamedParameters();
    const std::vector<TpSplit> splits = model_->ParameterSplits();
    for (size_t i = 0; i < named.size(); ++i) {
      if (named[i].second.requires_grad()) tp_split_.push_back(splits[i] != TpSplit::kReplicated);
    }
  }
  if (runtime_.rank() == 0) {
    spdlog::info("optimizer state: {:.2f} MiB on rank 0{}", optimizer_->state_bytes() / 1048576.0,
                 shard ? " (sharded over " + std::to_string(dp.size()) + " dp ranks)" : "");
  }
  checkpointer_ = std::make_unique<Checkpointer>(config_, runtime_, *model_, *optimizer_, *data_);
  step_ = resumed_at_ = checkpointer_->Restore();
  slicer_ = std::make_unique<MicrobatchSlicer>(config.train, dp.rank(), dp.size());
  // The MFU peak (a GEMM rate measured now, on CPUs) before the loader's workers start preparing batches on the same
  // cores: a measurement they share the cores with reads low by however much work they happen to do.
  mfu_ = std::make_unique<MfuMeter>(config.logging, device_, runtime_.dims().world_size(), runtime_.rank() == 0);
  loader_ = std::make_unique<BatchLoader>(
      *data_, [slicer = *slicer_, first = step_](int64_t i) { return slicer.Request(first, i); },
      config.data.prefetch, config.data.workers);
}

Trainer::StepData Trainer::Prepare(BatchLoader& loader) {
  StepData d;
  Communicator& cp = runtime_.group(Axis::kCP);
  for (int64_t j = 0; j < slicer_->per_step(); ++j) {
    Batch batch = loader.Next();  // prepared in the background
    d.targets += batch.labels.ne(-100).sum().item<double>();
    d.tokens += batch.mask_words.ne(0).sum().item<double>();
    d.flops += BatchFlops(config_.model, model_->spec(), batch);
    if (cp.size() > 1) {
      // Every cp rank holds the whole microbatch and keeps its share of the tokens, balanced per sample.
      const CpLayout layout = PlanCpLayout(batch.mask_words, cp.size(), config_.parallel.cp_block, config_.parallel.cp_split);
      batch = ShardBatch(batch, layout, cp.rank());
    }
    d.micro.push_back(device_.is_cpu() ? std::move(batch) : batch.To(device_));
  }
  return d;
}

StepMetrics Trainer::Step() {
  const auto start = std::chrono::steady_clock::now();
  StepMetrics m;
  m.step = step_ + 1;
  m.lr = LearningRate(config_.optimizer, config_.train.steps, step_);
  const LoggingConfig& log = config_.logging;
  const bool traced = !log.trace_path.empty() && m.step >= log.trace_first_step && m.step <= log.trace_last_step;
  Communicator& dp = runtime_.group(Axis::kDP);

  const double t0 = TraceRecorder::NowUs();
  const StepData data = [&] {
    RECORD_USER_SCOPE(scope::kData);
    return Prepare(*loader_);
  }();
  const double targets = SumOver(dp, data.targets);  // the loss is per labelled token of the global batch
  m.tokens = static_cast<int64_t>(SumOver(dp, data.tokens));

  const double t1 = TraceRecorder::NowUs();
  // 0 except on the last stage. The gradient buckets start their sums during the last backward (overlap).
  const double stage_loss = executor_->Step(data.micro, targets, [this] { grad_sync_->Arm(); });
  m.loss = SumOver(runtime_.world(), stage_loss) / targets;

  const double t2 = TraceRecorder::NowUs();
  {
    RECORD_USER_SCOPE(scope::kGradSync);
    grad_sync_->Finish();
  }

  const double t3 = TraceRecorder::NowUs();
  {
    RECORD_USER_SCOPE(scope::kOptimizer);
    // Each parameter lives on one stage (and, sharded, each element on one replica; split by tp, each slice on
    // one tp rank): the global norm adds the stages' squared norms once, each tp slice once and every tensor
    // that is whole on all tp ranks once.
    const std::vector<torch::Tensor> grads = grad_sync_->grads();
    const auto [split, whole] = grad_sync_->SquaredNorms(tp_split_);
    m.grad_norm = std::sqrt(SumOver(runtime_.group(Axis::kPP), SumOver(runtime_.group(Axis::kTP), split) + whole));
    const double factor = ClipFactor(m.grad_norm, config_.train.grad_clip_norm);
    if (factor < 1.0) ScaleGrads(grads, factor);
    optimizer_->Step(m.lr, grads);
    grad_sync_->GatherParams();
    grad_sync_->ZeroGrad();
  }
  if (traced) {
    trace_.Phase(TracePhase::kData, m.step, t0, t1);
    trace_.Actions(executor_->timings(), m.step, t1);
    trace_.Phase(TracePhase::kGradSync, m.step, t2, t3);
    for (const auto& [launched, done] : grad_sync_->bucket_spans()) {
      trace_.Phase(TracePhase::kBucketReduce, m.step, launched, done);
    }
    trace_.Phase(TracePhase::kOptimizer, m.step, t3, TraceRecorder::NowUs());
  }

  ++step_;
  m.step_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  m.flops = SumOver(dp, data.flops);
  m.mfu = mfu_->Mfu(m.flops, m.step_seconds);
  m.peak_memory_mib = device_.is_cuda() ? CudaMemoryUsedMiB(device_.index()) : PeakResidentMiB();
  return m;
}

void Trainer::Save() { checkpointer_->Save(step_); }

void Trainer::Stop(int signal) {
  const bool saved = checkpointer_->Due(step_);  // this step's checkpoint is already written
  if (!config_.checkpoint.dir.empty() && !saved) Save();
  if (runtime_.rank() != 0) return;
  if (config_.checkpoint.dir.empty()) {
    spdlog::warn("stopping after step {} on {} without a checkpoint (checkpoint.dir is not set)", step_,
                 SignalName(signal));
  } else {
    spdlog::info("stopping after step {} on {}; resume from {} with --resume", step_, SignalName(signal),
                 config_.checkpoint.dir + "/" + CheckpointDirName(step_));
  }
}

double Trainer::Evaluate() {
  CS_CHECK(eval_data_, "evaluation needs eval.interval > 0 or eval.at_end");
  // Eval step e reads the slice training step e would: the same layout, a fixed set of batches.
  BatchLoader loader(*eval_data_, [slicer = *slicer_](int64_t i) { return slicer.Request(0, i); },
                     config_.data.prefetch, config_.data.workers);
  double loss = 0, targets = 0;
  for (int64_t e = 0; e < config_.eval.steps; ++e) {
    const StepData d = Prepare(loader);
    targets += SumOver(runtime_.group(Axis::kDP), d.targets);
    loss += SumOver(runtime_.world(), executor_->Evaluate(d.micro));  // 0 except on the last stage
  }
  return loss / targets;
}

std::vector<StepMetrics> Trainer::Run() {
  StepLogger logger(config_, runtime_.rank() == 0, resumed_at_);
  std::vector<StepMetrics> history;
  while (step_ < config_.train.steps) {
    StepMetrics m = Step();
    const EvalConfig& ev = config_.eval;
    if ((ev.interval > 0 && m.step % ev.interval == 0) || (ev.at_end && m.step == config_.train.steps)) {
      m.eval_loss = Evaluate();
    }
    logger.Log(m);
    if (!std::isfinite(m.loss)) {
      throw Error("training diverged: loss is " + std::to_string(m.loss) + " at step " + std::to_string(m.step) +
                  "; lower optimizer.lr");
    }
    history.push_back(m);
    if (checkpointer_->Due(m.step)) Save();
    // Ranks see a stop signal at different moments: they stop after the first step any of them saw it at.
    const int signal = static_cast<int>(ReduceOver(runtime_.world(), StopSignal(), ReduceOp::kMax));
    if (signal != 0 && step_ < config_.train.steps) {
      Stop(signal);
      break;
    }
  }
  if (!config_.checkpoint.export_hf.empty()) checkpointer_->ExportHf();
  if (!config_.logging.trace_path.empty()) {
    trace_.Write(runtime_, *plan_, config_.logging.trace_path);
    if (runtime_.rank() == 0) spdlog::info("wrote the execution trace to {}", config_.logging.trace_path);
  }
  logger.Finish(history);
  return history;
}

}  // namespace cornstarch
