// This rank's training state on disk. The stage's first data- and context-parallel rank writes its parameters
// ("model.<name>") and, unsharded, the AdamW moments of the trainable ones ("exp_avg.<name>", "exp_avg_sq.<name>");
// with a sharded optimizer each dp rank writes the slices of the moments it owns. Everything is read back by name
// and element range (train/checkpoint.h), so any layout, sharded or not, resumes any other. At the
// end the model can be exported in Hugging Face layout: every stage writes its shard, rank 0 the index
// (io/hf_weights.h).
#pragma once

#include <cstdint>

#include "cornstarch/plan/config.h"
#include "cornstarch/train/checkpoint.h"

namespace cornstarch {

class AdamW;
class DistRuntime;
class MultimodalModel;

class Checkpointer {
 public:
  // None of the arguments is owned; all outlive the checkpointer.
  Checkpointer(const Config& config, DistRuntime& runtime, MultimodalModel& model, AdamW& optimizer);

  // Loads checkpoint.resume when set and returns its step (0 when starting fresh). Throws Error when the
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
  };
  std::vector<StatePiece> OptimizerState() const;
  bool WritesModel() const;  // this rank writes its stage's parameters
  bool WritesState() const;  // this rank writes its optimizer state

  const Config& config_;
  DistRuntime& runtime_;
  MultimodalModel& model_;
  AdamW& optimizer_;
};

}  // namespace cornstarch
