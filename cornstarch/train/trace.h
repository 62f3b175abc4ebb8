// The measured execution as a Chrome-trace / Perfetto JSON for the whole job: every rank records its pipeline actions
// (forward, backward, send, receive — a receive's span is its wait) and the data, gradient-sync and optimizer phases of
// the traced steps, and each gradient bucket's reduction from its start (during the last backward when overlapped) to
// when the step found it complete, on a track of its own; rank 0 gathers them into one file (one process per rank), and
// draws the measured pipeline of the last traced step next to the planned one as an SVG. Timestamps are the node's
// monotonic clock, shared by the ranks of a node (not aligned across nodes).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cornstarch/train/executor.h"

namespace cornstarch {

class DistRuntime;

enum class TracePhase { kData, kGradSync, kOptimizer, kBucketReduce };

class TraceRecorder {
 public:
  // Microseconds on the shared monotonic clock.
  static double NowUs();

  void Phase(TracePhase phase, int64_t step, double start_us, double end_us);
  // The executor's timings of one step, which began at `start_us`.
  void Actions(const std::vector<ActionTiming>& timings, int64_t step, double start_us);

  // Collective over the world: rank 0 writes `path` (JSON) and, if `plan` has more than one stage, `path`.svg
  // with the planned and the measured timeline of the last recorded step.
  void Write(DistRuntime& runtime, const PipelinePlan& plan, const std::string& path) const;

 private:
  struct Event {
    std::optional<TracePhase> phase;  // set: a phase of the step; unset: the pipeline action `action`
    Action action;
    int64_t step;
    double start_us, end_us;
  };
  std::vector<Event> events_;
};

}  // namespace cornstarch
