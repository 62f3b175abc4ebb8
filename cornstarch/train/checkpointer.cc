#include "cornstarch/train/checkpointer.h"

#include <filesystem>

#include "cornstarch/base/check.h"
#include "cornstarch/base/logging.h"
#include "cornstarch/dist/runtime.h"
#include "cornstarch/io/hf_weights.h"
#include "cornstarch/model/multimodal_model.h"
#include "cornstarch/train/adamw.h"

namespace cornstarch {

Checkpointer::Checkpointer(const Config& config, DistRuntime& runtime, MultimodalModel& model, AdamW& optimizer)
    : config_(config), runtime_(runtime), model_(model), optimizer_(optimizer) {}

bool Checkpointer::WritesModel() const {
  const ParallelDims::Coord c = runtime_.coord();
  return c.dp == 0 && c.cp == 0;
}

bool Checkpointer::WritesState() const {
  // cp ranks hold the same state as their replica's first; unsharded, so do the dp ranks.
  return runtime_.coord().cp == 0 && (runtime_.coord().dp == 0 || config_.optimizer.shard);
}

std::vector<Checkpointer::StatePiece> Checkpointer::OptimizerState() const {
  std::vector<std::pair<std::string, at::Tensor>> trainable;  // the optimizer's parameters, in its order
  for (const auto& [name, p] : model_.NamedParameters()) {
    if (p.requires_grad()) trainable.emplace_back(name, p);
  }
  std::vector<StatePiece> pieces;
  for (const auto& [prefix, moments] : {std::pair{"exp_avg.", &optimizer_.exp_avg()},
                                        std::pair{"exp_avg_sq.", &optimizer_.exp_avg_sq()}}) {
    for (size_t i = 0; i < moments->size(); ++i) {
      const ParamSlice& s = optimizer_.slices()[i];
      const auto& [name, p] = trainable.at(static_cast<size_t>(s.param));
      pieces.push_back({prefix + name, s.begin, (*moments)[i], p.numel(), s.begin == 0 && s.length == p.numel()});
    }
  }
  return pieces;
}

int64_t Checkpointer::Restore() {
  const std::string dir = ResolveResume(config_.checkpoint);
  if (dir.empty()) return 0;
  CheckpointReader reader(dir, config_);
  if (reader.step() >= config_.train.steps) {
    throw Error("checkpoint.resume: " + dir + " is at step " + std::to_string(reader.step()) +
                ", nothing left of train.steps=" + std::to_string(config_.train.steps));
  }
  for (const auto& [name, p] : model_.NamedParameters()) reader.Read("model." + name, p);
  for (const StatePiece& s : OptimizerState()) {
    if (s.whole) {
      reader.Read(s.name, s.state);
    } else {
      reader.ReadRange(s.name, s.numel, s.begin, s.state);
    }
  }
  optimizer_.set_step_count(reader.optimizer_step());
  if (runtime_.rank() == 0) spdlog::info("resumed from {} at step {}", dir, reader.step());
  return reader.step();
}

bool Checkpointer::Due(int64_t step) const {
  const CheckpointConfig& ck = config_.checkpoint;
  return !ck.dir.empty() && ((ck.interval > 0 && step % ck.interval == 0) || step == config_.train.steps);
}

void Checkpointer::Save(int64_t step) {
  NamedTensors shard;
  if (WritesModel()) {
    for (const auto& [name, p] : model_.NamedParameters()) shard.emplace_back("model." + name, p);
  }
  if (WritesState()) {
    for (const StatePiece& s : OptimizerState()) {
      const std::string range = fmt::format("[{}:{}]", s.begin, s.begin + s.state.numel());
      shard.emplace_back(s.whole ? s.name : s.name + range, s.state);
    }
  }
  const ParallelDims& d = runtime_.dims();
  std::vector<std::string> names;
  for (int stage = 0; stage < d.degree(Axis::kPP); ++stage) {
    for (int dp = 0; dp < (config_.optimizer.shard ? d.degree(Axis::kDP) : 1); ++dp) {
      names.push_back(ShardName(stage, dp));
    }
  }
  const ParallelDims::Coord c = runtime_.coord();
  const bool writes = WritesModel() || WritesState();
  SaveCheckpoint(config_, runtime_, step, optimizer_.step_count(), shard, writes ? ShardName(c.pp, c.dp) : "", names);
  if (runtime_.rank() == 0) spdlog::info("saved {}", config_.checkpoint.dir + "/" + CheckpointDirName(step));
}

void Checkpointer::ExportHf() {
  const std::string& dir = config_.checkpoint.export_hf;
  const int stages = runtime_.dims().degree(Axis::kPP);
  std::vector<std::string> shards;
  for (int s = 0; s < stages; ++s) shards.push_back(fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, stages));
  if (runtime_.rank() == 0) std::filesystem::create_directories(dir);
  runtime_.world().Barrier();
  if (WritesModel()) ExportHfWeights(model_, dir + "/" + shards[runtime_.coord().pp]);
  runtime_.world().Barrier();
  if (runtime_.rank() == 0) {
    WriteHfIndex(dir, shards);
    spdlog::info("exported the model in Hugging Face layout to {}", dir);
  }
  runtime_.world().Barrier();
}

}  // namespace cornstarch
