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

bool Checkpointer::Writes() const {
  const ParallelDims::Coord c = runtime_.coord();
  return c.dp == 0 && c.cp == 0;
}

NamedTensors Checkpointer::Shard() const {
  NamedTensors shard, moments;
  size_t i = 0;  // optimizer state follows the trainable parameters in NamedParameters order
  for (const auto& [name, p] : model_.NamedParameters()) {
    shard.emplace_back("model." + name, p);
    if (!p.requires_grad()) continue;
    moments.emplace_back("exp_avg." + name, optimizer_.exp_avg().at(i));
    moments.emplace_back("exp_avg_sq." + name, optimizer_.exp_avg_sq().at(i));
    ++i;
  }
  shard.insert(shard.end(), moments.begin(), moments.end());
  return shard;
}

int64_t Checkpointer::Restore() {
  const std::string dir = ResolveResume(config_.checkpoint);
  if (dir.empty()) return 0;
  CheckpointReader reader(dir, config_);
  if (reader.step() >= config_.train.steps) {
    throw Error("checkpoint.resume: " + dir + " is at step " + std::to_string(reader.step()) +
                ", nothing left of train.steps=" + std::to_string(config_.train.steps));
  }
  for (const auto& [name, t] : Shard()) reader.Read(name, t);
  optimizer_.set_step_count(reader.optimizer_step());
  if (runtime_.rank() == 0) spdlog::info("resumed from {} at step {}", dir, reader.step());
  return reader.step();
}

bool Checkpointer::Due(int64_t step) const {
  const CheckpointConfig& ck = config_.checkpoint;
  return !ck.dir.empty() && ((ck.interval > 0 && step % ck.interval == 0) || step == config_.train.steps);
}

void Checkpointer::Save(int64_t step) {
  SaveCheckpoint(config_, runtime_, step, optimizer_.step_count(), Shard(), Writes());
  if (runtime_.rank() == 0) spdlog::info("saved {}", config_.checkpoint.dir + "/" + CheckpointDirName(step));
}

void Checkpointer::ExportHf() {
  const std::string& dir = config_.checkpoint.export_hf;
  const int stages = runtime_.dims().degree(Axis::kPP);
  std::vector<std::string> shards;
  for (int s = 0; s < stages; ++s) shards.push_back(fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, stages));
  if (runtime_.rank() == 0) std::filesystem::create_directories(dir);
  runtime_.world().Barrier();
  if (Writes()) ExportHfWeights(model_, dir + "/" + shards[runtime_.coord().pp]);
  runtime_.world().Barrier();
  if (runtime_.rank() == 0) {
    WriteHfIndex(dir, shards);
    spdlog::info("exported the model in Hugging Face layout to {}", dir);
  }
  runtime_.world().Barrier();
}

}  // namespace cornstarch
