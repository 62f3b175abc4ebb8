// TensorBoard scalars without TensorFlow: an event file is a sequence of length- and CRC32C-framed records,
// each an `Event` protobuf (wall time, step, and a summary of tag -> float values), small enough to encode by hand.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "cornstarch/train/metrics.h"

namespace cornstarch {

// CRC-32C (Castagnoli), as TFRecord framing uses it.
uint32_t Crc32c(const char* data, size_t n);

class TensorBoardWriter {
 public:
  // Writes `dir`/events.out.tfevents.<seconds>.cornstarch (created with its directory); an empty dir writes
  // nothing. Throws Error naming logging.tensorboard_dir when it cannot write.
  explicit TensorBoardWriter(const std::string& dir);
  const std::string& path() const { return path_; }

  void Scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values);
  // loss, lr, grad_norm, tokens_per_second, step_seconds, mfu and peak_memory_mib under "train/".
  void Write(const StepMetrics& m);

 private:
  void Record(const std::string& event);
  std::string path_;
  std::ofstream out_;
};

}  // namespace cornstarch
