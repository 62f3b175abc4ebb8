// Pipeline schedules as data: for every pipeline rank, the ordered list of actions it runs (forward, backward,
// send and receive of activations and gradients, per stage and microbatch), printed like "2F0" (stage 2, forward,
// microbatch 0) or "0SEND_F3>2" (to stage 2). A rank runs one stage, or under interleaving several non-adjacent
// stages of the LLM (its virtual stages, as Megatron-LM's interleaved 1F1B). The generator (1F1B over the
// encoder->LLM stage DAG, interleaved where ranks hold several stages) decides only the order of compute; one
// lowering pass, AddSendRecv, adds the communication every schedule needs the same way (as PyTorch pipelining's
// _add_send_recv does). Schedules also read from and print to text, so one can be written by hand. One
// validator, one timing simulator, and one replay loop under both (the validator's dry run that finds deadlocks
// and the simulator's clocks advance the same way). Pure.
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

// The inverse of Action::ToString: "2F0", "0SEND_F3>2", "1RECV_B0>2" (a peer after sends and receives only).
// Throws Error quoting `text` and saying what was expected.
Action ParseAction(const std::string& text);

using Schedule = std::vector<std::vector<Action>>;  // [pipeline rank] -> actions in order

// Schedules as text, so that one can be written by hand and read by a person: one line per pipeline rank, from
// rank 0 up, "rank <r>:" then the rank's actions separated by blanks, e.g. "rank 0: 0F0 0F1 0B0 0B1". `#` starts a
// comment; blank lines are skipped. The text may leave the sends and receives out (AddSendRecv places them).
std::string FormatSchedule(const Schedule& schedule);

// Throws Error naming `source`:<line> for a line that is not a rank line, a rank listed twice or out of order, or
// a malformed action. (Whether each action's stage runs on that rank is the graph's business: ValidateSchedule.)
Schedule ParseSchedule(const std::string& text, const std::string& source);

// The stage DAG: every encoder chain's stages feed the next stage of their chain, the last stage of each encoder
// chain feeds the first LLM stage, LLM stages form a chain ending in the loss. Each stage runs on one pipeline
// rank: encoder stages on ranks of their own, LLM stage j on the LLM's rank j mod (LLM ranks), so that with
// v stages per LLM rank (interleaving) each rank holds v non-adjacent pieces of the LLM and no edge stays on a rank.
struct StageGraph {
  std::vector<std::vector<int>> next, prev;
  std::vector<bool> has_backward;  // false: the stage runs forward only (nothing trainable at or before it)
  std::vector<int> rank;           // the pipeline rank that runs each stage
  int first_llm = 0;               // the first LLM stage (the encoders' stages come before it)
  int virtual_stages = 1;          // LLM stages per LLM rank
  int num_stages() const { return static_cast<int>(next.size()); }
  int num_ranks() const { return rank.empty() ? 0 : rank.back() + 1; }
  int last() const { return num_stages() - 1; }
  std::vector<int> StagesOf(int r) const;  // in stage order
};

// `encoder_stages[c]` stages per encoder chain (in order), then `llm_stages` (virtual_stages per LLM rank);
// `has_backward` per stage (all stages of the encoder chains first). Stage ids follow ParallelDims' stage sets:
// encoders, then the LLM. Throws Error naming parallel.virtual_stages when llm_stages does not split into
// virtual_stages per rank over at least two ranks (a rank would otherwise pass activations to itself).
StageGraph MakeStageGraph(const std::vector<int>& encoder_stages, int llm_stages, const std::vector<bool>& has_backward,
                          int virtual_stages = 1);

// Whether interleaving fits `llm_ranks` ranks and `microbatches`: microbatches go round in groups of g = M / max(1,
// floor(M / llm_ranks)) (the ranks, or all M when fewer), so M must split into such groups (as in PyTorch's
// ScheduleInterleaved1F1B); and it needs at least two LLM ranks.
bool InterleavingFits(int llm_ranks, int microbatches);

// 1F1B on the DAG, compute only. One stage per rank: a stage d stages away from the loss (itself included) runs
// min(M, d - 1) warm-up forwards, then alternates forward and backward, then drains its backwards; stages without
// backward run M forwards. Interleaved (virtual_stages v > 1): LLM rank r of p runs its v stages' M forwards in
// rounds of g microbatches (stage 0's g, then stage 1's, ...) and its backwards the same way from its last
// stage down, with min(M v, (v - 1) g + 2 (p - 1 - r)) warm-up forwards; encoder stages stay plain, warmed up
// enough to feed the first LLM stage every microbatch it runs before each backward. AddSendRecv turns it into
// what the ranks run. Throws Error naming the microbatches when !InterleavingFits.
Schedule Generate1F1B(const StageGraph& graph, int microbatches);

// Lowers a compute-only schedule (as generators emit, or as written by hand) to one the ranks can run, so that
// no schedule places its own communication. For each compute action: a receive from every producer before a
// forward and a send to every consumer after it; a receive from every consumer before a backward and a send after
// it to every producer that has a backward (the others have no use for the gradient). Without interleaving they
// sit right around the action. Interleaved, ranks work in Megatron-LM's steps (a forward directly followed by a
// backward is one, but not a rank's last forward with its first backward) and exchange once after each step: its
// sends, and every receive whose data is sent by then in a dry run of the schedule with receives where consumed.
// Throws Error when `compute` already holds a send or receive or names a stage the graph lacks.
// REQUIRES: one action list per rank of `graph`.
Schedule AddSendRecv(const StageGraph& graph, const Schedule& compute);

// Throws Error when an action sits on a rank that does not run its stage, a forward is missing or repeated, a
// backward precedes its forward or appears on a stage without backward, a send or receive crosses no edge of the
// graph, a send has no matching receive (or the
// reverse), or the dry run deadlocks (sends are buffered, receives block). The message holds the step x rank
// grid with the offending action marked.
void ValidateSchedule(const StageGraph& graph, const Schedule& schedule, int microbatches);

// A schedule file (the text format above) for `graph` and `microbatches`: parsed, lowered by AddSendRecv when it
// lists compute only, validated. Throws Error naming `path` when it cannot be read, lists other ranks than the
// graph's, or fails ParseSchedule or ValidateSchedule.
Schedule LoadScheduleFile(const std::string& path, const StageGraph& graph, int microbatches);

// The communication of a lowered schedule as NCCL runs it: each maximal run of consecutive sends and receives on a
// rank is one group, posted together (ncclGroupStart/End), so a rank that sends and receives in the same step
// (the 1F1B steady state: an activation downstream, a gradient from downstream) waits on neither alone. Returns the
// groups of `actions` as [begin, end) index ranges, in order.
struct CommGroup {
  int begin = 0, end = 0;
  bool operator==(const CommGroup& o) const { return begin == o.begin && end == o.end; }
};
std::vector<CommGroup> CommGroups(const std::vector<Action>& actions);

// The dry run of those groups under NCCL's rendezvous semantics, stricter than ValidateSchedule's buffered sends:
// a rank posts a group once the compute before it and its previous group are done (one stream), and the group
// completes once every counterpart of its operations is posted. Operations between two ranks carry no tag: the
// n-th send from rank a to b lands in the n-th receive b posts from a, whatever stages they are for. Throws Error
// with the grid when those two are different messages (the data would land in another microbatch's buffer) or when
// the dry run deadlocks.
// REQUIRES: a schedule that ValidateSchedule accepts.
void ValidateGroupedSchedule(const StageGraph& graph, const Schedule& schedule);

struct Timeline {
  struct Span {
    Action action;
    double start = 0, end = 0;
  };
  std::vector<std::vector<Span>> ranks;  // compute spans per pipeline rank
  double makespan = 0;
  double bubble_fraction = 0;  // idle share of ranks x makespan
};

// Replays a schedule with per-stage forward/backward times and a fixed transfer time per message: a send costs
// its rank nothing and arrives `transfer` after its rank's clock, a receive waits for the arrival, compute
// spans its time. REQUIRES: a schedule that ValidateSchedule accepts.
Timeline Simulate(const StageGraph& graph, const Schedule& schedule, const std::vector<double>& forward,
                  const std::vector<double>& backward, double transfer);

}  // namespace cornstarch
