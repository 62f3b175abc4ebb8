// This rank's training state on disk. The stage's first data- and context-parallel rank writes its parameters
// ("model.<name>") and, unsharded, the AdamW moments of the trainable ones ("exp_avg.<name>", "exp_avg_sq.<name>");
// with a sharded optimizer each dp rank writes the slices of the moments it owns. Everything is read back by name
// and element range (train/checkpoint.h), so any layout, sharded or not, resumes any other. Every tp rank writes
// its own slices into its own shard (nothing is gathered); on restore a rank reads its slice straight from the file
// at the same tp, or cuts it out of the whole tensor the reader assembles from the slices, so a checkpoint of any
// tp resumes at any other. A range of a tp slice is not a range of the whole tensor, so with a sharded optimizer
// the moments of tp-split parameters are first assembled over the dp group (its first rank writes the slice); the
// rest stays in per-rank ranges. At the
// end the model can be exported in Hugging Face layout: every stage writes its shard, rank 0 the index
// (io/hf_weights.h). A streamed dataset's position (every data stream's cursor at the step) goes into the manifest.
#pragma once

#include <cstdint>

#include "cornstarch/model/tensor_parallel.h"
#include "cornstarch/plan/config.h"
#include "cornstarch/train/checkpoint.h"

namespace cornstarch {

class AdamW;
class Dataset;
class DistRuntime;
class MultimodalModel;

class Checkpointer {
 public:
  // None of the arguments is owned; all outlive the checkpointer.
  Checkpointer(const Config& config, DistRuntime& runtime, MultimodalModel& model, AdamW& optimizer, Dataset& data);

  // Loads checkpoint.resume when set (the dataset resumes at its step) and returns its step (0 when starting fresh). Throws Error when the
  // checkpoint leaves nothing of train.steps to run.
  int64_t Restore();
  // Whether step `step` (1-based) saves: every checkpoint.interval steps and the last one, when checkpoint.dir is set.
  bool Due(int64_t step) const;
  // Collective: saves the state after step `step` to checkpoint.dir.
  void Save(int64_t step);
  // Collective: writes the model to checkpoint.export_hf (one shard per stage, then the index).
  void ExportHf();

 private:
  // A piece of the optimizer state this rank holds: elements [begin, begin + state.numel()) of tensor `name`,
  // which has `numel` elements.
  struct StatePiece {
    std::string name;
    int64_t begin;
    at::Tensor state;
    int64_t numel;
    bool whole;  // all of the tensor
    TpSplit split;  // how the tensor lies over the tp ranks (its parameter's layout)
    std::vector<int64_t> sizes;  // this rank's parameter's (its tp slice's) sizes
  };
  std::vector<StatePiece> OptimizerState() const;
  std::vector<StatePiece> ModelState() const;  // the parameters as "model.<name>", whole pieces
  std::vector<StatePiece> TrainableState() const;  // ModelState's trainable ones: the optimizer's, in its order
  // ("exp_avg.", its moments), ("exp_avg_sq.", its moments): the AdamW state by name prefix, slice by slice.
  std::vector<std::pair<std::string, const std::vector<at::Tensor>*>> Moments() const;
  // Reads piece `s` from the checkpoint: its slice of the whole tensor when tensor-parallel.
  void ReadPiece(CheckpointReader& reader, const StatePiece& s) const;
  // The whole tensor: the piece itself, or (a tp slice) gathered over the tp group. For the Hugging Face export.
  at::Tensor Whole(const StatePiece& s) const;
  // Collective over dp, for a sharded optimizer under tp: this rank's tp slice of the moments of every tp-split
  // trainable parameter, assembled from the dp ranks' ranges, under its slice name (on the dp group's first rank).
  NamedTensors AssembledSplitMoments() const;
  bool ShardedOverDp() const;  // the optimizer's moments are split over the dp ranks
  bool WritesModel() const;  // this rank's tp group writes its stage's parameters
  bool WritesState() const;  // this rank's tp group writes its optimizer state

  const Config& config_;
  DistRuntime& runtime_;
  MultimodalModel& model_;
  AdamW& optimizer_;
  Dataset& data_;
};

}  // namespace cornstarch
