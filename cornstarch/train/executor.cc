#include "cornstarch/train/executor.h"

#include <torch/torch.h>

#include <chrono>

#include "cornstarch/device/autocast.h"
#include "cornstarch/dist/communicator.h"
#include "cornstarch/model/multimodal_model.h"
#include "cornstarch/base/check.h"

namespace cornstarch {

namespace {

// `t` as it travels between stages: bf16 under bf16 precision (floating-point tensors), else unchanged.
torch::Tensor Wire(const torch::Tensor& t, bool bf16) {
  return bf16 && t.is_floating_point() ? t.to(torch::kBFloat16) : t;
}

// Per microbatch: the activation's shape header, the activation, the gradient. Every pair of stages exchanges
// messages in schedule order, and the tags keep the three kinds apart.
constexpr int kTagsPerMicrobatch = 3;
int ShapeTag(int mb) { return kTagsPerMicrobatch * mb; }
int ActivationTag(int mb) { return kTagsPerMicrobatch * mb + 1; }
int GradientTag(int mb) { return kTagsPerMicrobatch * mb + 2; }
constexpr int kMaxTag = 32767;  // the smallest MPI_TAG_UB the MPI standard allows

// [ndim, dtype, sizes...]: activations up to 6-D.
constexpr int kHeaderLength = 8;

}  // namespace

struct PipelineExecutor::InFlight {
  ForwardContext ctx;
  std::map<int, torch::Tensor> inputs;  // producer stage -> received activation (a leaf), then its gradient
  torch::Tensor output, output_grad, loss;
};

PipelineExecutor::PipelineExecutor(MultimodalModel& model, const PipelinePlan& plan, int stage, Communicator& pp,
                                   Communicator& cp, Communicator* tp, Precision precision)
    : model_(model), plan_(plan), stage_(stage), pp_(pp), cp_(cp), tp_(tp), bf16_(precision == Precision::kBf16) {
  CS_CHECK(precision != Precision::kAuto, "the executor needs the effective precision");
  const int stages = plan.graph.num_stages();
  CS_CHECK(stage >= 0 && stage < stages, "stage ", stage, " of ", stages);
  CS_CHECK(stages == 1 || pp.size() == stages, "pipeline group of ", pp.size(), " ranks for ", stages, " stages");
  CS_CHECK(kTagsPerMicrobatch * static_cast<int>(plan.schedule[stage].size()) < kMaxTag, "too many microbatches");
  CS_CHECK(plan.graph.next[stage].size() <= 1, "stage ", stage, " feeds ", plan.graph.next[stage].size(), " stages");
  const ModelSpec& spec = model.spec();
  for (int l : plan.stages[stage].layers) {
    CS_CHECK(model.has_layer(l), "stage ", stage, " runs ", spec.layers[l].name, ", which this process lacks");
    if (runs_.empty() || runs_.back().chain != spec.layers[l].chain || runs_.back().end != l) {
      runs_.push_back({spec.layers[l].chain, l, l + 1});
    } else {
      ++runs_.back().end;
    }
  }
  for (int p : plan.graph.prev[stage]) producer_layer_[p] = plan.stages[p].layers.back();
  forward_graph_ = plan.graph;
  forward_graph_.has_backward.assign(forward_graph_.has_backward.size(), false);
}

PipelineExecutor::~PipelineExecutor() = default;

PipelineExecutor::InFlight& PipelineExecutor::Slot(int mb) {
  std::unique_ptr<InFlight>& slot = in_flight_[mb];
  if (!slot) slot = std::make_unique<InFlight>();
  return *slot;
}

double PipelineExecutor::Step(const std::vector<Batch>& micro, double loss_scale,
                              const std::function<void()>& before_last_backward) {
  return Run(plan_.schedule[stage_], micro, loss_scale, true, before_last_backward);
}

double PipelineExecutor::Evaluate(const std::vector<Batch>& micro) {
  const int m = static_cast<int>(micro.size());
  auto it = forward_schedules_.find(m);
  if (it == forward_schedules_.end()) {
    // Stages without backward run their forwards in order; lowering adds the activation messages only.
    Schedule s = AddSendRecv(forward_graph_, Generate1F1B(forward_graph_, m));
    ValidateSchedule(forward_graph_, s, m);
    it = forward_schedules_.emplace(m, std::move(s)).first;
  }
  torch::NoGradGuard no_grad;
  return Run(it->second[stage_], micro, 1.0, false);
}

double PipelineExecutor::Run(const std::vector<Action>& actions, const std::vector<Batch>& micro, double loss_scale,
                             bool timed, const std::function<void()>& before_last_backward) {
  using Clock = std::chrono::steady_clock;
  const auto begin = Clock::now();
  auto since = [&] { return std::chrono::duration<double>(Clock::now() - begin).count(); };
  if (timed) timings_.clear();
  loss_sum_ = 0;
  if (!micro.empty()) device_ = micro.front().input_ids.device();
  size_t last_backward = actions.size();
  for (size_t i = 0; i < actions.size(); ++i) {
    if (actions[i].type == ActionType::kBackward) last_backward = i;
  }
  for (size_t i = 0; i < actions.size(); ++i) {
    const Action& a = actions[i];
    if (i == last_backward && before_last_backward) before_last_backward();
    CS_CHECK(a.microbatch < static_cast<int>(micro.size()), "schedule needs microbatch ", a.microbatch, " of ",
             micro.size());
    const double start = since();
    switch (a.type) {
      case ActionType::kForward: Forward(a.microbatch, micro[a.microbatch], loss_scale); break;
      case ActionType::kBackward: Backward(a.microbatch); break;
      case ActionType::kRecvF: RecvActivation(a.microbatch, a.peer); break;
      case ActionType::kSendF: SendActivation(a.microbatch, a.peer); break;
      case ActionType::kRecvB: RecvGradient(a.microbatch, a.peer); break;
      case ActionType::kSendB: SendGradient(a.microbatch, a.peer); break;
    }
    if (timed) timings_.push_back({a, start, since()});
  }
  // Every send has been received once our peers are done with the step; waiting here keeps buffers alive until
  // then without ever blocking a stage on a peer that is still computing.
  for (std::unique_ptr<Work>& w : sends_) w->Wait();
  sends_.clear();
  in_flight_.clear();
  return loss_sum_;
}

void PipelineExecutor::Forward(int mb, const Batch& batch, double loss_scale) {
  const AutocastGuard autocast(device_.type(), {bf16_, torch::kBFloat16});
  InFlight& f = Slot(mb);
  const ModelSpec& spec = model_.spec();
  const int llm = spec.llm_chain();
  f.ctx = model_.MakeContext(batch);
  f.ctx.cp_group = &cp_;
  f.ctx.tp_group = tp_;
  f.ctx.features.assign(llm, torch::Tensor());
  std::map<int, torch::Tensor> from_layer;  // producer layer -> its output, received
  for (const auto& [peer, t] : f.inputs) from_layer[producer_layer_.at(peer)] = t;
  for (int c = 0; c < llm; ++c) {
    const auto it = from_layer.find(spec.chains[c].end - 1);
    if (it != from_layer.end()) f.ctx.features[c] = it->second;
  }
  const bool last = stage_ == plan_.graph.last();
  torch::Tensor x;
  for (const LayerRun& run : runs_) {
    const ChainSpec& chain = spec.chains[run.chain];
    const bool encoder = run.chain != llm;
    if (run.begin == chain.begin) {
      x = encoder ? batch.modalities[run.chain].inputs : torch::Tensor();
    } else {
      const auto it = from_layer.find(run.begin - 1);
      CS_CHECK(it != from_layer.end(), "stage ", stage_, " has no input for ", spec.layers[run.begin].name);
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

void PipelineExecutor::Backward(int mb) {
  InFlight& f = Slot(mb);
  if (f.loss.defined() && f.loss.requires_grad()) {
    f.loss.backward();
  } else if (f.output.defined() && f.output.requires_grad()) {
    CS_CHECK(f.output_grad.defined(), "stage ", stage_, " runs B", mb, " without the gradient of its output");
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

void PipelineExecutor::RecvActivation(int mb, int peer) {
  torch::Tensor header = torch::zeros({kHeaderLength}, torch::kLong);
  pp_.Recv(header, peer, ShapeTag(mb));
  const int64_t* h = header.data_ptr<int64_t>();
  CS_CHECK(h[0] >= 0 && h[0] <= kHeaderLength - 2, "stage ", stage_, " got an activation header of rank ", h[0]);
  const std::vector<int64_t> sizes(h + 2, h + 2 + h[0]);
  torch::Tensor t = torch::empty(sizes, torch::TensorOptions().dtype(static_cast<torch::ScalarType>(h[1])));
  pp_.Recv(t, peer, ActivationTag(mb));
  // Stages compute on fp32 activations (the residual stream); bf16 is only the wire format.
  t = t.to(device_, t.is_floating_point() ? torch::kFloat : t.scalar_type());
  if (torch::GradMode::is_enabled() && plan_.graph.has_backward[peer] && t.is_floating_point()) t.requires_grad_(true);
  Slot(mb).inputs[peer] = t;
}

void PipelineExecutor::SendActivation(int mb, int peer) {
  const torch::Tensor out = Wire(Slot(mb).output.detach(), bf16_).to(torch::kCPU).contiguous();
  CS_CHECK(out.dim() <= kHeaderLength - 2, "activation of rank ", out.dim());
  torch::Tensor header = torch::zeros({kHeaderLength}, torch::kLong);
  int64_t* h = header.data_ptr<int64_t>();
  h[0] = out.dim();
  h[1] = static_cast<int64_t>(out.scalar_type());
  for (int64_t d = 0; d < out.dim(); ++d) h[2 + d] = out.size(d);
  sends_.push_back(pp_.ISend(header, peer, ShapeTag(mb)));
  sends_.push_back(pp_.ISend(out, peer, ActivationTag(mb)));
}

void PipelineExecutor::RecvGradient(int mb, int peer) {
  InFlight& f = Slot(mb);
  CS_CHECK(f.output.defined(), "stage ", stage_, " receives a gradient for microbatch ", mb, " before its forward");
  torch::Tensor grad =
      Wire(torch::empty(f.output.sizes(), f.output.options().device(torch::kCPU).requires_grad(false)), bf16_);
  pp_.Recv(grad, peer, GradientTag(mb));
  f.output_grad = grad.to(f.output.device(), f.output.scalar_type());
}

void PipelineExecutor::SendGradient(int mb, int peer) {
  InFlight& f = Slot(mb);
  const auto it = f.inputs.find(peer);
  CS_CHECK(it != f.inputs.end(), "stage ", stage_, " has no gradient for stage ", peer, " in microbatch ", mb);
  sends_.push_back(pp_.ISend(Wire(it->second, bf16_).to(torch::kCPU).contiguous(), peer, GradientTag(mb)));
  f.inputs.erase(it);
}

}  // namespace cornstarch
