// Checkpoints. <checkpoint.dir>/step-NNNNNNNN/ holds one safetensors shard per pipeline stage, written by the
// stage's first data-parallel rank: its parameters as "model.<name>" and the AdamW moments of the trainable ones
// as "exp_avg.<name>" / "exp_avg_sq.<name>"; next to each shard a sidecar with its size, checksum and tensor
// names; and manifest.json (step, optimizer step, samples consumed, layout, seed and batch size), written last.
// The directory is assembled under a ".tmp" name and renamed once complete, so a job killed while saving never
// leaves a directory that looks complete. Training draws no random numbers after initialisation (samples are a
// function of (seed, index)), so step and samples consumed are the whole data and RNG position.
//
// Tensors are looked up by name, not by rank, so a checkpoint resumes on another pp/dp layout (re-sharding);
// seed and global batch size must match, and every tensor's shape must.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

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

// Collective over the world: saves step `step`. `shard` is this rank's stage shard, written when `writer`.
// Afterwards deletes all but the newest checkpoint.keep_last complete checkpoints.
void SaveCheckpoint(const Config& config, DistRuntime& runtime, int64_t step, int64_t optimizer_step,
                    const NamedTensors& shard, bool writer);

class CheckpointReader {
 public:
  // Reads and checks the manifest and the shard sidecars. Throws Error naming the file: missing manifest
  // (partial checkpoint), malformed JSON, other format, other seed or batch size.
  CheckpointReader(const std::string& dir, const Config& config);
  ~CheckpointReader();

  int64_t step() const { return step_; }
  int64_t optimizer_step() const { return optimizer_step_; }

  // Copies tensor `name` into `into`. The shard's size and checksum are verified on its first use; a missing
  // tensor, a shape mismatch or a corrupt shard throws Error naming the file and tensor.
  void Read(const std::string& name, const at::Tensor& into);

 private:
  const SafetensorsFile& Shard(const std::string& file);

  std::string dir_;
  int64_t step_ = 0, optimizer_step_ = 0;
  std::map<std::string, std::string> file_of_;  // tensor name -> shard file
  std::map<std::string, std::pair<uint64_t, std::string>> expected_;  // shard file -> (bytes, checksum)
  std::map<std::string, std::unique_ptr<SafetensorsFile>> open_;
};

}  // namespace cornstarch
