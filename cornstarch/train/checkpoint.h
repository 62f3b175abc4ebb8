// Checkpoints. <checkpoint.dir>/step-NNNNNNNN/ holds safetensors shards: per pipeline stage, "stage-<s>" written
// by the stage's first data- and context-parallel rank with its parameters as "model.<name>" and its AdamW
// moments as "exp_avg.<name>" / "exp_avg_sq.<name>"; with a sharded optimizer every dp rank of the stage holds a
// slice of the moments and writes it ("stage-<s>-dp-<r>" for r > 0) as pieces "exp_avg.<name>[begin:end]" (flat
// element range of the parameter). Under tensor parallelism every tp rank writes its own shard ("-tp-<t>" for
// t > 0) with its slices of the split tensors as "<name>@tp<t>/<size>:<cut>" (train/checkpoint_manifest.h); the
// first tp rank also writes the tensors every tp rank holds whole. Next to each shard a sidecar with its size,
// checksum and tensor names; and manifest.json (step, optimizer step, samples consumed, layout, seed and batch
// size, the shards), written last.
// The directory is assembled under a ".tmp" name and renamed once complete, so a job killed while saving never
// leaves a directory that looks complete. Training draws no random numbers after initialisation (samples are a
// function of (seed, index)), so step and samples consumed are the whole data and RNG position.
//
// Tensors are looked up by name and element range, not by rank, so a checkpoint resumes on another pp/dp layout
// and with or without a sharded optimizer (re-sharding); a tp slice is read straight from its file when the saving
// run had the same tp, else the whole tensor is assembled from the slices and cut again (any tp resumes any
// other). Seed and global batch size must match, and every tensor's shape must.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "cornstarch/model/tensor_parallel.h"
#include "cornstarch/plan/config.h"

namespace cornstarch {

class DistRuntime;
class SafetensorsFile;

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// "step-00000120"
std::string CheckpointDirName(int64_t step);

// Steps of the complete checkpoints (manifest present) in `dir`, ascending; none when `dir` does not exist.
std::vector<int64_t> CompleteCheckpoints(const std::string& dir);

// checkpoint.resume resolved to a directory: "" stays "", "latest" is the newest complete checkpoint of
// checkpoint.dir (Error when there is none), anything else is taken as the directory.
std::string ResolveResume(const CheckpointConfig& checkpoint);

// The shard file (without extension) that dp rank `dp`, tp rank `tp` of stage `stage` writes: "stage-<s>",
// "stage-<s>-dp-<r>", "stage-<s>-tp-<t>", "stage-<s>-dp-<r>-tp-<t>".
std::string ShardName(int stage, int dp, int tp);

// Collective over the world: saves step `step`. `shard` is what this rank writes as shard `shard_name` (nothing
// when the name is empty); `shard_names` are all the shards the checkpoint consists of. Afterwards deletes all
// but the newest checkpoint.keep_last complete checkpoints. `data_streams`: the streamed dataset's cursors (Dataset::
// StreamStates of all ranks), the same on every rank; none for a dataset without streams.
void SaveCheckpoint(const Config& config, DistRuntime& runtime, int64_t step, int64_t optimizer_step,
                    const NamedTensors& shard, const std::string& shard_name,
                    const std::vector<std::string>& shard_names,
                    const std::vector<std::vector<int64_t>>& data_streams);

class CheckpointReader {
 public:
  // Reads and checks the manifest and the shard sidecars. Throws Error naming the file: missing manifest
  // (partial checkpoint), malformed JSON, other format, other seed or batch size.
  CheckpointReader(const std::string& dir, const Config& config);
  ~CheckpointReader();

  int64_t step() const { return step_; }
  int64_t optimizer_step() const { return optimizer_step_; }
  const std::vector<std::vector<int64_t>>& data_streams() const { return data_streams_; }

  // Copies tensor `name` into `into` (same shape). The shard's size and checksum are verified on its first use; a
  // missing tensor, a shape mismatch or a corrupt shard throws Error naming the file and tensor.
  void Read(const std::string& name, const at::Tensor& into);
  // Copies elements [begin, begin + into.numel()) of tensor `name`, flattened, into `into`; the tensor must have
  // `numel` elements. Assembled from whichever pieces hold them: a whole tensor or "[begin:end]" pieces.
  void ReadRange(const std::string& name, int64_t numel, int64_t begin, const at::Tensor& into);
  // Copies tp rank `shard.rank`'s slice of tensor `name`, cut as `split`, into `into`: straight from the stored
  // slice when the checkpoint was saved at the same tp with the same cut, else cut out of the whole tensor.
  void ReadTpSlice(const std::string& name, TpSplit split, const TpShard& shard, const at::Tensor& into);

 private:
  struct Piece {
    int64_t begin, end;
    std::string name;
  };
  // A tensor saved as tp slices: their cut, and the slice names by tp rank.
  struct Slices {
    TpSplit split;
    std::vector<std::string> names;
  };
  const SafetensorsFile& Shard(const std::string& file);
  at::Tensor Get(const std::string& name);
  at::Tensor Assemble(const std::string& name);  // the whole tensor from its tp slices

  std::string dir_;
  int64_t step_ = 0, optimizer_step_ = 0;
  std::vector<std::vector<int64_t>> data_streams_;
  std::map<std::string, std::string> file_of_;  // tensor name -> shard file
  std::map<std::string, std::vector<Piece>> pieces_;  // "exp_avg.<name>" -> its "[begin:end]" pieces
  std::map<std::string, Slices> slices_;              // "model.<name>" -> its tp slices
  std::map<std::string, std::pair<uint64_t, std::string>> expected_;  // shard file -> (bytes, checksum)
  std::map<std::string, std::unique_ptr<SafetensorsFile>> open_;
};

}  // namespace cornstarch
