// A checkpoint's manifest.json and shard sidecars (train/checkpoint.h), parsed and checked from their text. No
// tensors and no files, so it is fuzzed on its own (fuzz/checkpoint_manifest_fuzz.cc): a checkpoint copied from
// elsewhere is untrusted input like any download.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cornstarch/plan/tp_split.h"

namespace cornstarch {

inline constexpr const char* kCheckpointFormat = "cornstarch-checkpoint";
inline constexpr int kCheckpointVersion = 1;

struct CheckpointManifest {
  int64_t step = 0, optimizer_step = 0, samples_consumed = 0;
  int64_t seed = 0, global_batch_size = 0;  // of the run that saved it
  std::vector<std::string> shards;          // sidecar names (without ".json")
  std::vector<std::vector<int64_t>> data_streams;  // optional: a streamed dataset's cursors, non-negative
};

// Throws Error naming `path`: malformed JSON, another format or version, a missing or mistyped field, negative
// steps, samples consumed other than step x global batch size, a shard name that is not a plain file name, data
// stream cursors that are not lists of equal length of non-negative integers.
CheckpointManifest ParseCheckpointManifest(const std::string& text, const std::string& path);

struct ShardSidecar {
  std::string file;  // the shard, a plain file name in the checkpoint directory
  uint64_t bytes = 0;
  std::string checksum;
  std::vector<std::string> tensors;
};

// Throws Error naming `path` for malformed JSON, a missing or mistyped field or a file that is not a plain name.
ShardSidecar ParseShardSidecar(const std::string& text, const std::string& path);

// A piece "<tensor>[begin:end]" of a sharded optimizer's state: elements [begin, end) of <tensor>, flattened.
struct TensorPiece {
  std::string tensor;
  int64_t begin = 0, end = 0;
};

// The piece `name` denotes; nullopt when it is a plain tensor name. Throws Error for a range that is reversed or
// does not fit 64 bits.
std::optional<TensorPiece> ParsePieceName(const std::string& name);

// A tensor-parallel rank's slice "<tensor>@tp<rank>/<size>:<cut>" (cut: dim0, dim1 or qkv, as TpSplit): what
// tp rank `rank` of `size` holds of <tensor>, cut as `split`.
struct TpSliceName {
  std::string tensor;
  int rank = 0, size = 1;
  TpSplit split = TpSplit::kDim0;
};

std::string FormatTpSliceName(const TpSliceName& slice);
// The slice `name` denotes; nullopt when it denotes none. Throws Error for a rank outside [0, size) or an unknown cut.
std::optional<TpSliceName> ParseTpSliceName(const std::string& name);

}  // namespace cornstarch
