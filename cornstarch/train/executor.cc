#include "cornstarch/train/executor.h"

#include <torch/torch.h>

#include <chrono>

#include "cornstarch/device/autocast.h"
#include "cornstarch/dist/communicator.h"
#include "cornstarch/model/multimodal_model.h"
#include "cornstarch/base/check.h"

namespace cornstarch {

namespace {

// Per microbatch and edge of the stage graph (named by its consumer: an edge's producers run on different ranks):
// the activation, the gradient. MPI keeps them apart by tag; NCCL, which has no tags, by order (the schedule's
// groups match between peers: ValidateGroupedSchedule).
int Tag(int mb, int consumer, int stages, bool gradient) { return 2 * (mb * stages + consumer) + (gradient ? 1 : 0); }
constexpr int kMaxTag = 32767;  // the smallest MPI_TAG_UB the MPI standard allows

}  // namespace

struct PipelineExecutor::InFlight {
  ForwardContext ctx;
  std::map<int, torch::Tensor> inputs;  // producer stage -> received activation (a leaf), then its gradient
  torch::Tensor output, output_grad, loss;
};

PipelineExecutor::PipelineExecutor(MultimodalModel& model, const PipelinePlan& plan, int rank, Communicator& pp,
                                   Communicator& cp, Communicator* tp, Precision precision)
    : model_(model), plan_(plan), rank_(rank), pp_(pp), cp_(cp), tp_(tp), bf16_(precision == Precision::kBf16) {
  CS_CHECK(precision != Precision::kAuto, "the executor needs the effective precision");
  const int ranks = plan.graph.num_ranks();
  CS_CHECK(rank >= 0 && rank < ranks, "pipeline rank ", rank, " of ", ranks);
  CS_CHECK(ranks == 1 || pp.size() == ranks, "pipeline group of ", pp.size(), " ranks for ", ranks, " ranks");
  const ModelSpec& spec = model.spec();
  for (int stage : plan.graph.StagesOf(rank)) {
    CS_CHECK(plan.graph.next[stage].size() <= 1, "stage ", stage, " feeds ", plan.graph.next[stage].size(), " stages");
    StageRuns& runs = stages_[stage];
    for (int l : plan.stages[stage].layers) {
      CS_CHECK(model.has_layer(l), "stage ", stage, " runs ", spec.layers[l].name, ", which this process lacks");
      if (runs.runs.empty() || runs.runs.back().chain != spec.layers[l].chain || runs.runs.back().end != l) {
        runs.runs.push_back({spec.layers[l].chain, l, l + 1});
      } else {
        ++runs.runs.back().end;
      }
    }
    for (int p : plan.graph.prev[stage]) runs.producer_layer[p] = plan.stages[p].layers.back();
  }
  forward_graph_ = plan.graph;
  forward_graph_.has_backward.assign(forward_graph_.has_backward.size(), false);
  // NCCL buffers no send and matches by order: a schedule (a hand-written one, say) that only buffered, tagged
  // messages could run is refused before the first step rather than hanging in it.
  if (ranks > 1 && pp.takes_device_tensors()) ValidateGroupedSchedule(plan.graph, plan.schedule);
}

PipelineExecutor::~PipelineExecutor() = default;

PipelineExecutor::InFlight& PipelineExecutor::Slot(int stage, int mb) {
  std::unique_ptr<InFlight>& slot = in_flight_[{stage, mb}];
  if (!slot) slot = std::make_unique<InFlight>();
  return *slot;
}

double PipelineExecutor::Step(const std::vector<Batch>& micro, double loss_scale,
                              const std::function<void()>& before_last_backward) {
  return Run(plan_.schedule[rank_], micro, loss_scale, true, before_last_backward);
}

double PipelineExecutor::Evaluate(const std::vector<Batch>& micro) {
  const int m = static_cast<int>(micro.size());
  auto it = forward_schedules_.find(m);
  if (it == forward_schedules_.end()) {
    // Stages without backward run their forwards in order; lowering adds the activation messages only.
    Schedule s = AddSendRecv(forward_graph_, Generate1F1B(forward_graph_, m));
    ValidateSchedule(forward_graph_, s, m);
    if (pp_.takes_device_tensors()) ValidateGroupedSchedule(forward_graph_, s);
    it = forward_schedules_.emplace(m, std::move(s)).first;
  }
  torch::NoGradGuard no_grad;
  return Run(it->second[rank_], micro, 1.0, false);
}

double PipelineExecutor::Run(const std::vector<Action>& actions, const std::vector<Batch>& micro, double loss_scale,
                             bool timed, const std::function<void()>& before_last_backward) {
  using Clock = std::chrono::steady_clock;
  const auto begin = Clock::now();
  auto since = [&] { return std::chrono::duration<double>(Clock::now() - begin).count(); };
  if (timed) timings_.clear();
  loss_sum_ = 0;
  if (!micro.empty()) device_ = micro.front().input_ids.device();
  CS_CHECK(Tag(static_cast<int>(micro.size()), 0, plan_.graph.num_stages(), false) < kMaxTag, micro.size(),
           " microbatches over ", plan_.graph.num_stages(), " stages exceed the MPI tags");
  int last_backward = -1;
  for (int i = 0; i < static_cast<int>(actions.size()); ++i) {
    CS_CHECK(actions[i].microbatch < static_cast<int>(micro.size()), "schedule needs microbatch ",
             actions[i].microbatch, " of ", micro.size());
    if (actions[i].type == ActionType::kBackward) last_backward = i;
  }
  // Each run of sends and receives between two computes is posted as one group.
  const std::vector<CommGroup> groups = CommGroups(actions);
  size_t next_group = 0;
  for (int i = 0; i < static_cast<int>(actions.size());) {
    const Action& a = actions[i];
    const double start = since();
    int end = i + 1;
    if (next_group < groups.size() && groups[next_group].begin == i) {
      end = groups[next_group++].end;
      Exchange(std::vector<Action>(actions.begin() + i, actions.begin() + end), micro);
    } else {
      if (i == last_backward && before_last_backward) before_last_backward();
      if (a.type == ActionType::kForward) {
        Forward(a.stage, a.microbatch, micro[a.microbatch], loss_scale);
      } else {
        Backward(a.stage, a.microbatch);
      }
    }
    if (timed) {
      for (; i < end; ++i) timings_.push_back({actions[i], start, since()});
    }
    i = end;
  }
  // Every send has been received once our peers are done with the step; waiting here keeps buffers alive until
  // then without ever blocking a stage on a peer that is still computing.
  for (std::unique_ptr<Work>& w : sends_) w->Wait();
  sends_.clear();
  in_flight_.clear();
  return loss_sum_;
}

void PipelineExecutor::Forward(int stage, int mb, const Batch& batch, double loss_scale) {
  const AutocastGuard autocast(device_.type(), {bf16_, torch::kBFloat16});
  InFlight& f = Slot(stage, mb);
  const StageRuns& mine = stages_.at(stage);
  const ModelSpec& spec = model_.spec();
  const int llm = spec.llm_chain();
  f.ctx = model_.MakeContext(batch);
  f.ctx.cp_group = &cp_;
  f.ctx.tp_group = tp_;
  f.ctx.features.assign(llm, torch::Tensor());
  std::map<int, torch::Tensor> from_layer;  // producer layer -> its output, received
  for (const auto& [peer, t] : f.inputs) from_layer[mine.producer_layer.at(peer)] = t;
  for (int c = 0; c < llm; ++c) {
    const auto it = from_layer.find(spec.chains[c].end - 1);
    if (it != from_layer.end()) f.ctx.features[c] = it->second;
  }
  const bool last = stage == plan_.graph.last();
  torch::Tensor x;
  for (const LayerRun& run : mine.runs) {
    const ChainSpec& chain = spec.chains[run.chain];
    const bool encoder = run.chain != llm;
    if (run.begin == chain.begin) {
      x = encoder ? batch.modalities[run.chain].inputs : torch::Tensor();
    } else {
      const auto it = from_layer.find(run.begin - 1);
      CS_CHECK(it != from_layer.end(), "stage ", stage, " has no input for ", spec.layers[run.begin].name);
      x = it->second;
    }
    // The last stage stops before the LM head: the loss applies the head to the labelled positions only.
    const int end = last && run.chain == llm && run.end == chain.end ? run.end - 1 : run.end;
    x = model_.RunLayers(run.chain, run.begin, end, x, batch, f.ctx);
    if (encoder && run.end == chain.end) f.ctx.features[run.chain] = x;
  }
  if (last) {
    const torch::Tensor loss = model_.HeadLossSum(x, batch, tp_);
    if (tp_ == nullptr || tp_->rank() == 0) loss_sum_ += loss.item<double>();
    f.loss = loss / loss_scale;
  } else {
    f.output = x;
  }
}

void PipelineExecutor::Backward(int stage, int mb) {
  InFlight& f = Slot(stage, mb);
  if (f.loss.defined() && f.loss.requires_grad()) {
    f.loss.backward();
  } else if (f.output.defined() && f.output.requires_grad()) {
    CS_CHECK(f.output_grad.defined(), "stage ", stage, " runs B", mb, " without the gradient of its output");
    torch::autograd::backward({f.output}, {f.output_grad});
  }
  // Keep only what the gradient sends need: the inputs' gradients (zeros where an input did not influence the
  // output, e.g. an encoder without instances in this microbatch).
  for (auto& [peer, t] : f.inputs) {
    if (plan_.graph.has_backward[peer]) t = t.grad().defined() ? t.grad() : torch::zeros_like(t);
  }
  f.ctx = ForwardContext();
  f.output = f.output_grad = f.loss = torch::Tensor();
}

void PipelineExecutor::Exchange(const std::vector<Action>& group, const std::vector<Batch>& micro) {
  // NCCL moves the tensors where they are; MPI moves host copies.
  const torch::TensorOptions wire = torch::TensorOptions()
                                        .dtype(bf16_ ? torch::kBFloat16 : torch::kFloat)
                                        .device(pp_.takes_device_tensors() ? device_ : torch::Device(torch::kCPU));
  auto to_wire = [&](const torch::Tensor& t) { return t.detach().to(wire).contiguous(); };
  const int stages = plan_.graph.num_stages();
  std::vector<P2POp> ops;
  for (const Action& a : group) {
    InFlight& f = Slot(a.stage, a.microbatch);
    const Batch& batch = micro[a.microbatch];
    const int peer = plan_.graph.rank[a.peer];
    // Activations travel downstream, gradients upstream; the tag names the edge by its consumer.
    const bool downstream = a.type == ActionType::kSendF || a.type == ActionType::kRecvB;
    const int consumer = downstream ? a.peer : a.stage;
    const bool gradient = a.type == ActionType::kSendB || a.type == ActionType::kRecvB;
    const int tag = Tag(a.microbatch, consumer, stages, gradient);
    switch (a.type) {
      case ActionType::kSendF: {
        const std::vector<int64_t> expected = model_.OutputSizes(plan_.stages[a.stage].layers.back(), batch);
        CS_CHECK(f.output.sizes().vec() == expected, "stage ", a.stage, " sends an activation of ", f.output.sizes(),
                 " in microbatch ", a.microbatch, "; its receiver expects ", c10::IntArrayRef(expected));
        ops.push_back({P2POp::kSend, to_wire(f.output), peer, tag});
        break;
      }
      case ActionType::kRecvF:
        ops.push_back({P2POp::kRecv,
                       torch::empty(model_.OutputSizes(stages_.at(a.stage).producer_layer.at(a.peer), batch), wire),
                       peer, tag});
        break;
      case ActionType::kSendB: {
        const auto it = f.inputs.find(a.peer);
        CS_CHECK(it != f.inputs.end(), "stage ", a.stage, " has no gradient for stage ", a.peer, " in microbatch ",
                 a.microbatch);
        ops.push_back({P2POp::kSend, to_wire(it->second), peer, tag});
        f.inputs.erase(it);
        break;
      }
      case ActionType::kRecvB:
        CS_CHECK(f.output.defined(), "stage ", a.stage, " receives a gradient for microbatch ", a.microbatch,
                 " before its forward");
        ops.push_back({P2POp::kRecv, torch::empty(f.output.sizes(), wire), peer, tag});
        break;
      default: CS_CHECK(false, a.ToString(), " is not a send or receive");
    }
  }
  std::vector<std::unique_ptr<Work>> works = pp_.StartP2P(ops);
  for (size_t k = 0; k < ops.size(); ++k) {
    if (ops[k].kind == P2POp::kSend) {
      sends_.push_back(std::move(works[k]));  // completed at the end of the step
      continue;
    }
    works[k]->Wait();
    const Action& a = group[k];
    // Stages compute on fp32 activations (the residual stream); bf16 is only the wire format.
    torch::Tensor t = ops[k].tensor.to(device_, torch::kFloat);
    if (a.type == ActionType::kRecvF) {
      if (torch::GradMode::is_enabled() && plan_.graph.has_backward[a.peer]) t.requires_grad_(true);
      Slot(a.stage, a.microbatch).inputs[a.peer] = t;
    } else {
      Slot(a.stage, a.microbatch).output_grad = t;
    }
  }
}

}  // namespace cornstarch
