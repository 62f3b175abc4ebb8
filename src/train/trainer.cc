#include "cornstarch/train/trainer.h"

#include <torch/torch.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <cmath>

#include "cornstarch/attention/tile_mask.h"
#include "cornstarch/data/dataset.h"
#include "cornstarch/data/loader.h"
#include "cornstarch/dist/nccl_communicator.h"
#include "cornstarch/dist/runtime.h"
#include "cornstarch/io/hf_weights.h"
#include "cornstarch/io/safetensors.h"
#include "cornstarch/model/multimodal_model.h"
#include "cornstarch/pipeline/cost_model.h"
#include "cornstarch/pipeline/executor.h"
#include "cornstarch/pipeline/profiler.h"
#include "cornstarch/train/adamw.h"
#include "cornstarch/train/checkpoint.h"
#include "cornstarch/train/grad_sync.h"
#include "cornstarch/train/lr_schedule.h"
#include "cornstarch/train/tensorboard.h"
#include "cornstarch/util/check.h"
#include "cornstarch/util/cuda_device.h"
#include "cornstarch/util/logging.h"
#include "cornstarch/util/torch_runtime.h"

namespace cornstarch {

namespace {

// 25 MiB buckets, as PyTorch DDP: large enough to amortise the call, small enough to bound the extra memory.
constexpr int64_t kBucketBytes = 25 << 20;

std::unique_ptr<DistRuntime> SingleProcessRuntime(const Config& config) {
  return std::make_unique<DistRuntime>(config.parallel, LaunchEnv{}, nullptr, nullptr);
}

double SumOver(Communicator& group, double value) {
  torch::Tensor t = torch::full({1}, value, torch::kDouble);
  group.AllReduce(t, ReduceOp::kSum);
  return t.item<double>();
}

}  // namespace

Trainer::Trainer(const Config& config)
    : config_(config), own_runtime_(SingleProcessRuntime(config)), runtime_(*own_runtime_) {
  Init();
}

Trainer::Trainer(const Config& config, DistRuntime& runtime) : config_(config), runtime_(runtime) { Init(); }

void Trainer::Init() {
  const Config& config = config_;
  ConfigureTorchRuntime(config.train.num_threads, runtime_.env().local_world_size);
  const auto seed = static_cast<uint64_t>(config.train.seed);
  const ModelSpec spec = BuildModelSpec(config.model);
  std::vector<LayerCost> costs = MicrobatchCosts(config, spec);
  if (config.parallel.pp > 1 && config.parallel.pipeline_costs == "profile") {
    // Timings differ from rank to rank; every rank must plan on the same numbers.
    torch::Tensor seconds = torch::zeros({static_cast<int64_t>(spec.layers.size())}, torch::kDouble);
    if (runtime_.rank() == 0) {
      const std::vector<double> measured = ProfileForwardSeconds(config);
      std::copy(measured.begin(), measured.end(), seconds.data_ptr<double>());
    }
    runtime_.world().Broadcast(seconds, 0);
    const double* s = seconds.data_ptr<double>();
    costs = FrozenAwareCosts(spec, std::vector<double>(s, s + seconds.numel()));
  }
  plan_ = std::make_unique<PipelinePlan>(PlanFromConfig(config, spec, costs));
  const int stage = runtime_.coord().pp;
  model_ = std::make_unique<MultimodalModel>(config.model, seed, plan_->stages[stage].layers);
  const ModelConfig& m = config.model;
  for (int c = 0; c < static_cast<int>(spec.chains.size()); ++c) {
    if (!(c == spec.llm_chain() ? m.llm.weights : m.encoders[c].weights).empty()) LoadHfWeights(*model_, c);
  }
  // Initialised and loaded on the host (so a GPU run starts from the CPU run's exact weights), then moved.
  device_ = TrainingDevice(config.train.device, runtime_.env().local_rank);
  model_->To(device_);
  if (device_.is_cuda() && runtime_.group(Axis::kDP).size() > 1) {
    dp_nccl_ = MakeNcclCommunicator(runtime_.group(Axis::kDP), device_.index(), config.parallel.timeout_seconds, "dp");
  }
  executor_ = std::make_unique<PipelineExecutor>(*model_, *plan_, stage, runtime_.group(Axis::kPP),
                                                 runtime_.group(Axis::kCP));
  data_ = MakeDataset(config, seed);
  optimizer_ = std::make_unique<AdamW>(model_->TrainableParameters(), config.optimizer);
  grad_sync_ = std::make_unique<GradSync>(model_->TrainableParameters(), kBucketBytes);
  const std::string resume = ResolveResume(config.checkpoint);
  if (!resume.empty()) Restore(resume);
  // Request i is microbatch i % per_step of step step_ + i / per_step of this dp rank's slice.
  const TrainConfig& t = config.train;
  const int64_t local = t.global_batch_size / runtime_.group(Axis::kDP).size();
  const int64_t per_step = local / t.micro_batch_size, first_step = step_;
  const int64_t offset = runtime_.group(Axis::kDP).rank() * local;
  loader_ = std::make_unique<BatchLoader>(
      *data_,
      [=](int64_t i) {
        return BatchLoader::Slice{(first_step + i / per_step) * t.global_batch_size + offset +
                                      (i % per_step) * t.micro_batch_size,
                                  t.micro_batch_size};
      },
      config.data.prefetch);
  const std::string gpu = device_.is_cuda() ? CudaDeviceName(device_.index()) : "";
  if (config.logging.peak_tflops > 0) {
    peak_flops_ = config.logging.peak_tflops * 1e12;
  } else if (device_.is_cuda()) {
    peak_flops_ = GpuPeakTflops(gpu) * 1e12;
    if (peak_flops_ == 0 && runtime_.rank() == 0) {
      spdlog::warn("no peak rate known for '{}': MFU is reported as 0; set logging.peak_tflops", gpu);
    }
  } else {
    peak_flops_ = MeasureGemmFlops();
  }
  if (runtime_.rank() == 0 && device_.is_cuda()) {
    spdlog::info("training on {} GPU(s) like rank 0's {} (peak {:.0f} TFLOP/s for MFU)", runtime_.dims().world_size(),
                 gpu, peak_flops_ / 1e12);
  }
}

double Trainer::BatchFlops(const Batch& batch) const {
  const int64_t b = batch.batch_size(), s = batch.seq_len();
  const torch::Tensor words = batch.mask_words.contiguous();
  double pairs = 0;
  for (int64_t i = 0; i < b; ++i) pairs += TileMask(words[i].data_ptr<int64_t>(), s, s, s).allowed_pairs();
  const ModelSpec& spec = model_->spec();
  const std::vector<LayerCost> costs = FrozenAwareCosts(spec, EstimateForwardFlops(config_.model, spec, s, pairs / b));
  // Encoder layers run once per image or clip (real data has any number per sequence), the LLM once per sequence.
  double flops = 0;
  for (size_t l = 0; l < costs.size(); ++l) {
    const int chain = spec.layers[l].chain;
    const double runs = chain == spec.llm_chain() ? b : batch.modalities[chain].inputs.size(0);
    flops += costs[l].total() * runs;
  }
  return flops;
}

Trainer::~Trainer() = default;

NamedTensors Trainer::Shard() const {
  NamedTensors shard;
  size_t i = 0;  // optimizer state follows the trainable parameters in NamedParameters order
  NamedTensors moments;
  for (const auto& [name, p] : model_->NamedParameters()) {
    shard.emplace_back("model." + name, p);
    if (!p.requires_grad()) continue;
    moments.emplace_back("exp_avg." + name, optimizer_->exp_avg().at(i));
    moments.emplace_back("exp_avg_sq." + name, optimizer_->exp_avg_sq().at(i));
    ++i;
  }
  shard.insert(shard.end(), moments.begin(), moments.end());
  return shard;
}

void Trainer::Restore(const std::string& dir) {
  CheckpointReader reader(dir, config_);
  if (reader.step() >= config_.train.steps) {
    throw Error("checkpoint.resume: " + dir + " is at step " + std::to_string(reader.step()) +
                ", nothing left of train.steps=" + std::to_string(config_.train.steps));
  }
  for (const auto& [name, t] : Shard()) reader.Read(name, t);
  optimizer_->set_step_count(reader.optimizer_step());
  step_ = resumed_at_ = reader.step();
  if (runtime_.rank() == 0) spdlog::info("resumed from {} at step {}", dir, step_);
}

void Trainer::ExportHf() {
  // One shard per pipeline stage, then the index that Hugging Face loaders read.
  const std::string& dir = config_.checkpoint.export_hf;
  const ParallelDims::Coord c = runtime_.coord();
  const int stages = runtime_.dims().degree(Axis::kPP);
  auto shard = [&](int s) { return fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, stages); };
  if (runtime_.rank() == 0) std::filesystem::create_directories(dir);
  runtime_.world().Barrier();
  if (c.dp == 0 && c.cp == 0) ExportHfWeights(*model_, dir + "/" + shard(c.pp));
  runtime_.world().Barrier();
  if (runtime_.rank() == 0) {
    nlohmann::json map = nlohmann::json::object();
    for (int s = 0; s < stages; ++s) {
      const SafetensorsFile file(dir + "/" + shard(s));
      for (const auto& [name, e] : file.header().tensors) map[name] = shard(s);
    }
    WriteFileAtomically(dir + "/model.safetensors.index.json",
                        nlohmann::json{{"metadata", nlohmann::json::object()}, {"weight_map", map}}.dump(1) + "\n");
    spdlog::info("exported the model in Hugging Face layout to {}", dir);
  }
  runtime_.world().Barrier();
}

void Trainer::Save() {
  const ParallelDims::Coord c = runtime_.coord();
  SaveCheckpoint(config_, runtime_, step_, optimizer_->step_count(), Shard(), c.dp == 0 && c.cp == 0);
  if (runtime_.rank() == 0) {
    spdlog::info("saved {}", (config_.checkpoint.dir + "/" + CheckpointDirName(step_)));
  }
}

StepMetrics Trainer::Step() {
  const auto start = std::chrono::steady_clock::now();
  const TrainConfig& t = config_.train;
  StepMetrics m;
  m.step = step_ + 1;
  m.lr = LearningRate(config_.optimizer, t.steps, step_);

  // Each dp rank takes a contiguous slice of the global batch. Losses are normalised by the labelled tokens of
  // the whole global batch, so summing gradients over microbatches and ranks gives the one-big-batch gradient.
  const LoggingConfig& log = config_.logging;
  const bool traced = !log.trace_path.empty() && m.step >= log.trace_first_step && m.step <= log.trace_last_step;
  const double t0 = TraceRecorder::NowUs();
  Communicator& dp = runtime_.group(Axis::kDP);
  Communicator& cp = runtime_.group(Axis::kCP);
  const int64_t local = t.global_batch_size / dp.size();
  std::vector<Batch> micro;
  double local_targets = 0, local_tokens = 0, local_flops = 0;
  for (int64_t j = 0; j < local / t.micro_batch_size; ++j) {
    Batch batch = loader_->Next();  // microbatch j of this rank's slice, prepared in the background
    local_targets += batch.labels.ne(-100).sum().item<double>();
    local_tokens += batch.mask_words.ne(0).sum().item<double>();
    local_flops += BatchFlops(batch);
    if (cp.size() > 1) {
      // Every cp rank holds the whole microbatch and keeps its share of the tokens, balanced per sample.
      batch = ShardBatch(batch, PlanCpLayout(batch.mask_words, cp.size(), config_.parallel.cp_block,
                                             ParseCpSplit(config_.parallel.cp_split)),
                         cp.rank());
    }
    micro.push_back(device_.is_cpu() ? std::move(batch) : batch.To(device_));
  }
  const double targets = SumOver(dp, local_targets);
  m.tokens = static_cast<int64_t>(SumOver(dp, local_tokens));
  const double t1 = TraceRecorder::NowUs();
  // Only the last stage of each pipeline computes losses; the others add zeros.
  const double stage_loss = executor_->Step(micro, targets);
  const double t2 = TraceRecorder::NowUs();
  m.loss = SumOver(runtime_.world(), stage_loss) / targets;
  // The cp ranks of a replica computed the gradients of different tokens: they add up like dp replicas.
  grad_sync_->AllReduceSum(dp_nccl_ ? *dp_nccl_ : dp);
  grad_sync_->AllReduceSum(cp);
  const double t3 = TraceRecorder::NowUs();

  // Each parameter lives on one stage, and after the dp and cp sums every replica holds the same gradient: the
  // global norm adds the stages' squared norms once.
  const std::vector<torch::Tensor>& params = optimizer_->params();
  m.grad_norm = std::sqrt(SumOver(runtime_.group(Axis::kPP), SquaredGradNorm(params)));
  const double factor = ClipFactor(m.grad_norm, t.grad_clip_norm);
  if (factor < 1.0) ScaleGrads(params, factor);
  optimizer_->Step(m.lr);
  optimizer_->ZeroGrad();
  if (traced) {
    trace_.Phase(TracePhase::kData, m.step, t0, t1);
    trace_.Actions(executor_->timings(), m.step, t1);
    trace_.Phase(TracePhase::kGradSync, m.step, t2, t3);
    trace_.Phase(TracePhase::kOptimizer, m.step, t3, TraceRecorder::NowUs());
  }

  ++step_;
  m.step_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  m.flops = SumOver(dp, local_flops);
  m.mfu = peak_flops_ > 0 ? m.flops / (m.step_seconds * peak_flops_ * runtime_.dims().world_size()) : 0;
  m.peak_memory_mib = device_.is_cuda() ? CudaMemoryUsedMiB(device_.index()) : PeakResidentMiB();
  return m;
}

std::vector<StepMetrics> Trainer::Run() {
  const bool logs = runtime_.rank() == 0;
  MetricsWriter writer(logs ? config_.logging.metrics_path : "", resumed_at_);
  TensorBoardWriter board(logs ? config_.logging.tensorboard_dir : "");
  // On a terminal, a progress line that the step lines scroll above; Slurm logs get the plain lines only.
  const bool bar = logs && isatty(STDERR_FILENO) && spdlog::get_level() <= spdlog::level::info;
  const CheckpointConfig& ck = config_.checkpoint;
  std::vector<StepMetrics> history;
  const auto start = std::chrono::steady_clock::now();
  while (step_ < config_.train.steps) {
    const StepMetrics m = Step();
    writer.Write(m);
    board.Write(m);
    if (logs && (m.step == 1 || m.step % config_.logging.interval == 0 || m.step == config_.train.steps)) {
      if (bar) std::fprintf(stderr, "\r\033[K");
      spdlog::info(FormatStepLine(m, config_.train.steps));
    }
    if (bar) {
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::fprintf(stderr, "\r%s", FormatProgress(m.step - resumed_at_, config_.train.steps - resumed_at_, elapsed,
                                                   m.loss).c_str());
      if (m.step == config_.train.steps) std::fprintf(stderr, "\r\033[K");
      std::fflush(stderr);
    }
    if (!std::isfinite(m.loss)) throw Error("training diverged: loss is " + std::to_string(m.loss) + " at step " +
                                            std::to_string(m.step) + "; lower optimizer.lr");
    history.push_back(m);
    if (!ck.dir.empty() && ((ck.interval > 0 && m.step % ck.interval == 0) || m.step == config_.train.steps)) Save();
  }
  if (!ck.export_hf.empty()) ExportHf();
  if (!config_.logging.trace_path.empty()) {
    trace_.Write(runtime_, *plan_, config_.logging.trace_path);
    if (logs) spdlog::info("wrote the execution trace to {}", config_.logging.trace_path);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (logs && !history.empty()) {
    spdlog::info("finished {} steps in {:.1f} s; loss {:.4f} -> {:.4f}", history.size(), seconds,
                 history.front().loss, history.back().loss);
  }
  return history;
}

}  // namespace cornstarch
