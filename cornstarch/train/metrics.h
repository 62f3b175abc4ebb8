// Per-step training metrics: the record, the rank-0 log line and progress bar, and a writer of JSONL (one JSON
// object per line) or CSV (by the file's extension), flushed each step so a crashed run keeps what it logged.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <fstream>
#include <string>

namespace cornstarch {

struct StepMetrics {
  int64_t step = 0;         // 1-based optimizer step
  double loss = 0;          // mean cross-entropy per labelled token of the global batch
  double lr = 0;
  double grad_norm = 0;     // global norm before clipping
  int64_t tokens = 0;       // non-padding tokens processed in the step
  double step_seconds = 0;
  double flops = 0;         // model FLOPs executed by all ranks: frozen-aware backward, allowed attention pairs only
  double mfu = 0;           // flops / (step_seconds * peak FLOP/s * ranks)
  double peak_memory_mib = 0;  // this process's peak resident memory (cpu), or the GPU's memory in use (cuda)
  // Validation after this step (eval section), when it ran: mean cross-entropy per labelled token of all the eval
  // batches, and its exponential.
  std::optional<double> eval_loss;
  double eval_ppl() const { return eval_loss ? std::exp(*eval_loss) : 0; }
  double tokens_per_second() const { return step_seconds > 0 ? tokens / step_seconds : 0; }
};

std::string FormatStepLine(const StepMetrics& m, int64_t total_steps);

// "[=========>          ]  120/300  40% | loss 1.2345 | ETA 1:05" after `elapsed` seconds of training.
std::string FormatProgress(int64_t step, int64_t total_steps, double elapsed_seconds, double loss, int width = 30);

// This process's peak resident memory in MiB (VmHWM; 0 where /proc is unavailable).
double PeakResidentMiB();

class MetricsWriter {
 public:
  // Creates the parent directory; an empty path writes nothing; a path ending in ".csv" writes CSV with a header
  // row, anything else JSONL. Throws Error naming the path if it cannot open.
  // `resumed_at` > 0: a run resumed from that step keeps the file's records up to it and continues after them.
  explicit MetricsWriter(const std::string& path, int64_t resumed_at = 0);
  void Write(const StepMetrics& m);

 private:
  std::ofstream out_;
  bool csv_ = false;
};

}  // namespace cornstarch
