// Where a step's metrics go: the metrics file (JSONL/CSV) and TensorBoard events, the per-step log line every
// logging.interval steps, and on a terminal a progress line that the step lines scroll above (Slurm logs get the
// plain lines only). Only the rank that reports (rank 0) writes anything; the others hold an inert logger.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "cornstarch/plan/config.h"
#include "cornstarch/train/metrics.h"
#include "cornstarch/train/tensorboard.h"

namespace cornstarch {

class StepLogger {
 public:
  // `reports`: this rank writes and prints. `resumed_at`: the step a resumed run starts after (the metrics file
  // keeps its records up to it; the progress line counts from it).
  StepLogger(const Config& config, bool reports, int64_t resumed_at);

  void Log(const StepMetrics& m);
  // The closing line: steps run, seconds since construction, first and last loss.
  void Finish(const std::vector<StepMetrics>& history);

 private:
  const LoggingConfig logging_;
  const int64_t total_steps_, resumed_at_;
  const bool reports_, progress_line_;
  MetricsWriter metrics_;
  TensorBoardWriter board_;
  const std::chrono::steady_clock::time_point start_;
};

}  // namespace cornstarch
