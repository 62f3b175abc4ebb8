// Runs one pipeline rank's action list (plan/schedule.h) for an optimizer step: forwards and backwards of the
// layers of its stage (or, interleaved, of each of its stages), activations and gradients to and from the ranks
// of the neighbouring stages over the pipeline group. One executor for every layout: pp = 1 is a single stage
// whose list is F0 B0 F1 B1 ...
//
// What crosses a stage boundary is the output of the sending stage's last layer: an encoder's hidden state, its
// projected features (which the first LLM stage writes over the placeholders), or the LLM's hidden state. Every
// stage holds the step's microbatches itself (the data is a function of the seed), so masks and RoPE tables never
// travel, and both sides know each activation's shape from the config and the microbatch
// (MultimodalModel::OutputSizes): no message announces it, and microbatches may still differ in length. MPI tells
// messages apart by a tag of (microbatch, receiving stage, kind), NCCL by their order. Each run of
// sends and receives between two computes is posted as one group (Communicator::StartP2P): on NCCL the stage's
// sends and receives of one step then wait on each other's peers together, and activations stay on the GPU.
#pragma once

#include <c10/core/Device.h>

#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "cornstarch/plan/planner.h"

namespace cornstarch {

struct Batch;
class Communicator;
class MultimodalModel;
class Work;

struct ActionTiming {
  Action action;
  double start = 0, end = 0;  // seconds since the step began
};

class PipelineExecutor {
 public:
  // `model` holds at least the layers of `rank`'s stages; `pp` is the pipeline group, whose rank r runs the
  // stages plan.graph places on r (not owned; unused when the plan has one stage); `cp` the context-parallel group
  // the LLM's attention spans; `tp` the tensor-parallel group of a sharded model (null: none). A tp group runs the
  // same actions in lockstep, each rank exchanging activations with the ranks of its own tp coordinate on the
  // neighbouring stages.
  // `precision` (kFp32 or kBf16, EffectivePrecision) is how forwards compute and what dtype activations and
  // their gradients travel in between stages: in bf16 each forward action runs under autocast.
  PipelineExecutor(MultimodalModel& model, const PipelinePlan& plan, int rank, Communicator& pp, Communicator& cp,
                   Communicator* tp = nullptr, Precision precision = Precision::kFp32);
  ~PipelineExecutor();

  // Runs this rank's actions over the step's microbatches (plan's microbatch count); the gradient of
  // sum(token losses) / loss_scale accumulates into its parameters. Returns the sum of the token losses on the
  // last stage's rank (its first tp rank: they all compute the same) and 0 elsewhere. `before_last_backward` (if
  // set) runs just before the rank's last backward, whose gradients complete the step's for one stage (all of
  // them without interleaving): where overlapped gradient synchronisation arms itself.
  double Step(const std::vector<Batch>& micro, double loss_scale,
              const std::function<void()>& before_last_backward = {});

  // Forward passes only, without gradients: every stage runs its forwards of `micro` and passes them on (the
  // plan's stages, no backward anywhere). Returns the sum of the token losses on the last stage's rank, 0 elsewhere.
  double Evaluate(const std::vector<Batch>& micro);

  // Start and end of every action of the last Step, in order.
  const std::vector<ActionTiming>& timings() const { return timings_; }

 private:
  struct LayerRun {
    int chain, begin, end;  // layers [begin, end) of one chain, run back to back
  };
  struct StageRuns {
    std::vector<LayerRun> runs;
    std::map<int, int> producer_layer;  // producer stage -> the layer whose output it sends
  };
  struct InFlight;  // one stage's microbatch between its forward and its last gradient send

  InFlight& Slot(int stage, int mb);
  // `timed`: record timings() (training steps only: they are what traces show).
  double Run(const std::vector<Action>& actions, const std::vector<Batch>& micro, double loss_scale, bool timed,
             const std::function<void()>& before_last_backward = {});
  void Forward(int stage, int mb, const Batch& batch, double loss_scale);
  void Backward(int stage, int mb);
  // Posts `group` (consecutive sends and receives of the schedule) together and waits for its receives.
  void Exchange(const std::vector<Action>& group, const std::vector<Batch>& micro);

  MultimodalModel& model_;
  const PipelinePlan plan_;
  const int rank_;
  Communicator& pp_;
  Communicator& cp_;
  Communicator* tp_;
  bool bf16_;
  std::map<int, StageRuns> stages_;  // this rank's
  std::map<std::pair<int, int>, std::unique_ptr<InFlight>> in_flight_;  // by (stage, microbatch)
  std::vector<std::unique_ptr<Work>> sends_;  // completed at the end of the step
  std::vector<ActionTiming> timings_;
  StageGraph forward_graph_;  // the plan's graph without any backward: evaluation's
  std::map<int, Schedule> forward_schedules_;  // evaluation's, by microbatch count
  double loss_sum_ = 0;
  // Where the stage computes (the microbatches' device). Activations and gradients travel from there as they are
  // when the pipeline group takes device tensors (NCCL), else through host memory (MPI).
  c10::Device device_ = c10::kCPU;
};

}  // namespace cornstarch
