// Pipeline schedules as data: for every stage, the ordered list of actions its rank runs (forward, backward,
// send and receive of activations and gradients, per microbatch), printed like "2F0" (stage 2, forward,
// microbatch 0) or "0SEND_F3>2" (to stage 2). One generator (1F1B over the encoder->LLM stage DAG), one
// validator with a dry-run simulator that finds deadlocks, one timing simulator. Pure.
#pragma once

#include <string>
#include <vector>

namespace cornstarch {

enum class ActionType { kForward, kBackward, kSendF, kRecvF, kSendB, kRecvB };

struct Action {
  int stage = 0;
  ActionType type = ActionType::kForward;
  int microbatch = 0;
  int peer = -1;  // the other stage of a send/receive
  std::string ToString() const;
  bool operator==(const Action& o) const {
    return stage == o.stage && type == o.type && microbatch == o.microbatch && peer == o.peer;
  }
};

using Schedule = std::vector<std::vector<Action>>;  // [stage] -> actions in order

// The stage DAG: every encoder chain's stages feed the next stage of their chain, the last stage of each encoder
// chain feeds the first LLM stage, LLM stages form a chain ending in the loss.
struct StageGraph {
  std::vector<std::vector<int>> next, prev;
  std::vector<bool> has_backward;  // false: the stage runs forward only (nothing trainable at or before it)
  int num_stages() const { return static_cast<int>(next.size()); }
  int last() const { return num_stages() - 1; }
};

// `encoder_stages[c]` stages per encoder chain (in order), then `llm_stages`; `has_backward` per stage (all
// stages of the encoder chains first). Stage ids follow ParallelDims' stage sets: encoders, then the LLM.
StageGraph MakeStageGraph(const std::vector<int>& encoder_stages, int llm_stages, const std::vector<bool>& has_backward);

// 1F1B on the DAG: a stage d stages away from the loss (itself included) runs min(M, d - 1) warm-up forwards,
// then alternates forward and backward, then drains its backwards; stages without backward run M forwards.
// Receives come right before the compute that needs them, sends right after the compute that produced them;
// gradients go only to producers that have a backward.
Schedule Generate1F1B(const StageGraph& graph, int microbatches);

// Throws Error when a forward is missing or repeated, a backward precedes its forward or appears on a stage
// without backward, a send has no matching receive (or the reverse), or the dry run deadlocks (sends are
// buffered, receives block). The message holds the step x stage grid with the offending action marked.
void ValidateSchedule(const StageGraph& graph, const Schedule& schedule, int microbatches);

struct Timeline {
  struct Span {
    Action action;
    double start = 0, end = 0;
  };
  std::vector<std::vector<Span>> stages;  // compute spans per stage
  double makespan = 0;
  double bubble_fraction = 0;  // idle share of stages x makespan
};

// Replays a valid schedule with per-stage forward/backward times and a fixed transfer time per message.
Timeline Simulate(const StageGraph& graph, const Schedule& schedule, const std::vector<double>& forward,
                  const std::vector<double>& backward, double transfer);

}  // namespace cornstarch
