#include "cornstarch/train/checkpointer.h"

#include <filesystem>
#include <map>

#include "cornstarch/base/check.h"
#include "cornstarch/base/logging.h"
#include "cornstarch/data/dataset.h"
#include "cornstarch/dist/runtime.h"
#include "cornstarch/io/hf_weights.h"
#include "cornstarch/model/multimodal_model.h"
#include "cornstarch/train/adamw.h"
#include "cornstarch/train/checkpoint_manifest.h"

namespace cornstarch {

Checkpointer::Checkpointer(const Config& config, DistRuntime& runtime, MultimodalModel& model, AdamW& optimizer,
                           Dataset& data)
    : config_(config), runtime_(runtime), model_(model), optimizer_(optimizer), data_(data) {}

bool Checkpointer::WritesModel() const {
  const ParallelDims::Coord c = runtime_.coord();
  return c.dp == 0 && c.cp == 0;
}

bool Checkpointer::WritesState() const {
  // cp ranks hold the same state as their replica's first; unsharded, so do the dp ranks.
  return runtime_.coord().cp == 0 && (runtime_.coord().dp == 0 || config_.optimizer.shard);
}

bool Checkpointer::ShardedOverDp() const {
  return config_.optimizer.shard && runtime_.group(Axis::kDP).size() > 1;
}

std::vector<Checkpointer::StatePiece> Checkpointer::ModelState() const {
  const auto named = model_.NamedParameters();
  const std::vector<TpSplit> splits = model_.ParameterSplits();
  std::vector<StatePiece> pieces;
  for (size_t i = 0; i < named.size(); ++i) {
    const at::Tensor& p = named[i].second;
    pieces.push_back({"model." + named[i].first, 0, p, p.numel(), true, splits[i], p.sizes().vec()});
  }
  return pieces;
}

std::vector<Checkpointer::StatePiece> Checkpointer::TrainableState() const {
  std::vector<StatePiece> trainable;
  for (StatePiece& p : ModelState()) {
    if (p.state.requires_grad()) trainable.push_back(std::move(p));
  }
  return trainable;
}

std::vector<std::pair<std::string, const std::vector<at::Tensor>*>> Checkpointer::Moments() const {
  return {{"exp_avg.", &optimizer_.exp_avg()}, {"exp_avg_sq.", &optimizer_.exp_avg_sq()}};
}

std::vector<Checkpointer::StatePiece> Checkpointer::OptimizerState() const {
  const std::vector<StatePiece> trainable = TrainableState();
  std::vector<StatePiece> pieces;
  for (const auto& [prefix, moments] : Moments()) {
    for (size_t i = 0; i < moments->size(); ++i) {
      const ParamSlice& s = optimizer_.slices()[i];
      const StatePiece& p = trainable.at(static_cast<size_t>(s.param));
      const std::string name = prefix + p.name.substr(std::string("model.").size());
      pieces.push_back({name, s.begin, (*moments)[i], p.numel, s.begin == 0 && s.length == p.numel, p.split, p.sizes});
    }
  }
  return pieces;
}

at::Tensor Checkpointer::Whole(const StatePiece& s) const {
  // The runtime's tp group is MPI's, which reads host memory (training on GPUs uses an NCCL twin of it).
  return TpGather(s.split == TpSplit::kReplicated ? s.state : s.state.cpu(), s.split, runtime_.group(Axis::kTP));
}

NamedTensors Checkpointer::AssembledSplitMoments() const {
  const std::vector<StatePiece> trainable = TrainableState();
  Communicator& dp = runtime_.group(Axis::kDP);
  NamedTensors out;
  at::NoGradGuard no_grad;
  for (const auto& [prefix, moments] : Moments()) {
    for (size_t j = 0; j < trainable.size(); ++j) {
      const StatePiece& p = trainable[j];
      if (p.split == TpSplit::kReplicated) continue;
      // This rank's slices of the parameter's moment, zeros elsewhere: summed over dp, the whole tp slice (on the
      // host, where the dp group's MPI reads it).
      at::Tensor slice = at::zeros({p.numel}, at::kFloat);
      for (size_t i = 0; i < moments->size(); ++i) {
        const ParamSlice& s = optimizer_.slices()[i];
        if (s.param == static_cast<int>(j)) slice.narrow(0, s.begin, s.length).copy_((*moments)[i].reshape({-1}));
      }
      dp.AllReduce(slice, ReduceOp::kSum);
      const std::string name = prefix + p.name.substr(std::string("model.").size());
      if (dp.rank() == 0) out.emplace_back(FormatTpSliceName({name, model_.tp().rank, model_.tp().size, p.split}),
                                           slice.view(p.sizes));
    }
  }
  return out;
}

void Checkpointer::ReadPiece(CheckpointReader& reader, const StatePiece& s) const {
  if (s.split == TpSplit::kReplicated) {
    if (s.whole) reader.Read(s.name, s.state);
    else reader.ReadRange(s.name, s.numel, s.begin, s.state);
    return;
  }
  if (s.whole) {
    reader.ReadTpSlice(s.name, s.split, model_.tp(), s.state);
    return;
  }
  // A sharded optimizer's range of a tp slice.
  const at::Tensor slice = at::empty(s.sizes, s.state.options().requires_grad(false));
  reader.ReadTpSlice(s.name, s.split, model_.tp(), slice);
  at::NoGradGuard no_grad;
  s.state.copy_(slice.reshape({-1}).narrow(0, s.begin, s.state.numel()).reshape_as(s.state));
}

int64_t Checkpointer::Restore() {
  const std::string dir = ResolveResume(config_.checkpoint);
  if (dir.empty()) return 0;
  CheckpointReader reader(dir, config_);
  if (reader.step() >= config_.train.steps) {
    throw Error("checkpoint.resume: " + dir + " is at step " + std::to_string(reader.step()) +
                ", nothing left of train.steps=" + std::to_string(config_.train.steps));
  }
  for (const StatePiece& s : ModelState()) ReadPiece(reader, s);
  for (const StatePiece& s : OptimizerState()) ReadPiece(reader, s);
  optimizer_.set_step_count(reader.optimizer_step());
  data_.Resume(reader.step(), reader.data_streams());
  if (runtime_.rank() == 0) spdlog::info("resumed from {} at step {}", dir, reader.step());
  return reader.step();
}

bool Checkpointer::Due(int64_t step) const {
  const CheckpointConfig& ck = config_.checkpoint;
  return !ck.dir.empty() && ((ck.interval > 0 && step % ck.interval == 0) || step == config_.train.steps);
}

void Checkpointer::Save(int64_t step) {
  NamedTensors shard;
  const TpShard& tp = model_.tp();
  // A tp slice goes into this rank's own shard under its slice name; what every tp rank holds whole, the first
  // writes.
  auto keep = [&](const std::string& name, const at::Tensor& t, TpSplit split) {
    if (split != TpSplit::kReplicated && tp.active()) {
      shard.emplace_back(FormatTpSliceName({name, tp.rank, tp.size, split}), t);
    } else if (tp.rank == 0) {
      shard.emplace_back(name, t);
    }
  };
  if (WritesModel()) {
    for (const StatePiece& s : ModelState()) keep(s.name, s.state, s.split);
  }
  if (WritesState()) {
    // Sharded over dp, a rank holds ranges of its tp slices: assembled over dp first (a slice has no ranges).
    const bool assembled = ShardedOverDp() && tp.active();
    for (const StatePiece& s : OptimizerState()) {
      if (assembled && s.split != TpSplit::kReplicated) continue;
      keep(s.whole ? s.name : s.name + fmt::format("[{}:{}]", s.begin, s.begin + s.state.numel()), s.state, s.split);
    }
    if (assembled) {
      for (auto& named : AssembledSplitMoments()) shard.push_back(std::move(named));
    }
  }
  const ParallelDims& d = runtime_.dims();
  std::vector<std::string> names;
  for (int stage = 0; stage < d.degree(Axis::kPP); ++stage) {
    for (int dp = 0; dp < (config_.optimizer.shard ? d.degree(Axis::kDP) : 1); ++dp) {
      for (int t = 0; t < d.degree(Axis::kTP); ++t) names.push_back(ShardName(stage, dp, t));
    }
  }
  const ParallelDims::Coord c = runtime_.coord();
  const bool writes = WritesModel() || WritesState();
  // Every dp rank knows only its own data streams: gathered in stream order (dp rank r holds the r-th block).
  const std::vector<std::vector<int64_t>> mine = data_.StreamStates(step);
  std::vector<std::vector<int64_t>> streams;
  if (!mine.empty()) {
    const auto width = static_cast<int64_t>(mine[0].size());
    at::Tensor local = at::empty({static_cast<int64_t>(mine.size()), width}, at::kLong);
    for (size_t i = 0; i < mine.size(); ++i) {
      CS_CHECK(static_cast<int64_t>(mine[i].size()) == width, "stream states of unequal size");
      std::copy(mine[i].begin(), mine[i].end(), local[static_cast<int64_t>(i)].data_ptr<int64_t>());
    }
    Communicator& dp = runtime_.group(Axis::kDP);
    at::Tensor all = at::empty({dp.size() * local.size(0), width}, at::kLong);
    dp.AllGather(local, all);
    for (int64_t i = 0; i < all.size(0); ++i) {
      const int64_t* row = all[i].data_ptr<int64_t>();
      streams.emplace_back(row, row + width);
    }
  }
  SaveCheckpoint(config_, runtime_, step, optimizer_.step_count(), shard, writes ? ShardName(c.pp, c.dp, c.tp) : "",
                 names, streams);
  if (runtime_.rank() == 0) spdlog::info("saved {}", config_.checkpoint.dir + "/" + CheckpointDirName(step));
}

void Checkpointer::ExportHf() {
  const std::string& dir = config_.checkpoint.export_hf;
  const int stages = runtime_.dims().degree(Axis::kPP);
  std::vector<std::string> shards;
  for (int s = 0; s < stages; ++s) shards.push_back(fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, stages));
  if (runtime_.rank() == 0) std::filesystem::create_directories(dir);
  runtime_.world().Barrier();
  if (WritesModel()) {
    std::map<std::string, at::Tensor> whole;
    if (model_.tp().active()) {
      for (const StatePiece& s : ModelState()) whole[s.name.substr(std::string("model.").size())] = Whole(s);
    }
    if (runtime_.coord().tp == 0) ExportHfWeights(model_, dir + "/" + shards[runtime_.coord().pp], whole,
                                                     config_.checkpoint.export_dtype == FloatType::kBf16
                                                         ? at::kBFloat16
                                                         : at::kFloat);
  }
  runtime_.world().Barrier();
  if (runtime_.rank() == 0) {
    WriteHfIndex(dir, shards);
    spdlog::info("exported the model in Hugging Face layout to {}", dir);
  }
  runtime_.world().Barrier();
}

}  // namespace cornstarch
