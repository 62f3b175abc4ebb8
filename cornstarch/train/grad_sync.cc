#include "cornstarch/train/grad_sync.h"

#include <ATen/ATen.h>

#include <utility>

#include "cornstarch/base/check.h"
#include "cornstarch/dist/communicator.h"
#include "cornstarch/train/adamw.h"
#include "cornstarch/train/grad_hooks.h"
#include "cornstarch/train/trace.h"

namespace cornstarch {

GradSync::GradSync(std::vector<at::Tensor> params, int64_t bucket_bytes, Communicator& dp, Communicator& cp,
                   bool shard, bool overlap, bool bf16)
    : params_(std::move(params)), dp_(dp), cp_(cp), shard_(shard), bf16_(bf16) {
  CS_CHECK(!shard || dp.size() > 1, "a sharded optimizer needs dp > 1");
  std::vector<int64_t> numels;
  for (const at::Tensor& p : params_) numels.push_back(p.numel());
  const int64_t element = params_.empty() ? 4 : static_cast<int64_t>(params_.front().element_size());
  buckets_ = PlanGradBuckets(numels, element, bucket_bytes, shard ? dp.size() : 1);
  slices_ = shard ? ShardSlices(buckets_, dp.rank(), dp.size()) : WholeSlices(params_);
  bucket_of_.assign(params_.size(), 0);
  for (int k = 0; k < num_buckets(); ++k) {
    for (const GradBucket::Entry& e : buckets_[k].entries) bucket_of_[e.param] = k;
  }
  flat_.resize(buckets_.size());
  shard_buffer_.resize(buckets_.size());
  work_.resize(buckets_.size());
  spans_.resize(buckets_.size());
  if (overlap && dp.size() > 1) {
    for (int i = 0; i < static_cast<int>(params_.size()); ++i) {
      hooks_.push_back(std::make_unique<GradAccumulatedHook>(params_[i], [this, i] { OnAccumulated(i); }));
    }
  }
}

GradSync::~GradSync() = default;

void GradSync::Arm() {
  armed_ = true;
  ready_.assign(params_.size(), false);
  pending_.clear();
  for (const GradBucket& b : buckets_) pending_.push_back(static_cast<int>(b.entries.size()));
}

void GradSync::OnAccumulated(int param) {
  if (!armed_) return;
  CS_CHECK(!ready_[param], "parameter ", param, " received two gradients in one backward; overlapped gradient sync "
           "needs each parameter used once per backward (set parallel.overlap_grad_sync: false)");
  ready_[param] = true;
  if (--pending_[bucket_of_[param]] == 0) LaunchReady();
  for (int k = 0; k < next_; ++k) work_[k]->Progress();  // MPI advances started sums only when called
}

void GradSync::LaunchReady() {
  while (next_ < num_buckets() && pending_[next_] == 0) {
    Launch(next_++);
    ++started_early_;
  }
}

void GradSync::Launch(int k) {
  const GradBucket& b = buckets_[k];
  spans_[k] = {TraceRecorder::NowUs(), 0.0};
  std::vector<at::Tensor> parts;
  for (const GradBucket::Entry& e : b.entries) {
    at::Tensor& p = params_[e.param];
    if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p);  // the replicas sum what they all hold
    parts.push_back(p.grad().reshape({-1}));
  }
  if (b.padded > b.numel) parts.push_back(at::zeros({b.padded - b.numel}, parts.front().options()));
  flat_[k] = at::cat(parts);
  if (dp_.size() == 1) return;
  if (bf16_) flat_[k] = flat_[k].to(at::kBFloat16);
  if (shard_) {
    shard_buffer_[k] = at::empty({b.padded / dp_.size()}, flat_[k].options());
    work_[k] = dp_.IReduceScatter(flat_[k], shard_buffer_[k], ReduceOp::kSum);
  } else {
    work_[k] = dp_.IAllReduce(flat_[k], ReduceOp::kSum);
  }
}

void GradSync::Finish() {
  armed_ = false;
  if (dp_.size() == 1 && cp_.size() == 1) return;
  const double start = TraceRecorder::NowUs();
  while (next_ < num_buckets()) Launch(next_++);
  next_ = 0;
  overlapped_ = std::exchange(started_early_, 0);
  for (int k = 0; k < num_buckets(); ++k) {
    if (work_[k]) work_[k]->Wait();
    work_[k].reset();
    spans_[k].second = TraceRecorder::NowUs();
    // What this rank holds (its shard, or the whole bucket) is then summed over the cp ranks.
    at::Tensor& held = shard_ ? shard_buffer_[k] : flat_[k];
    if (cp_.size() > 1) cp_.AllReduce(held, ReduceOp::kSum);
    if (shard_ && bf16_) held = held.to(at::kFloat);  // the optimizer's gradient slices are fp32
    if (!shard_) {
      for (const GradBucket::Entry& e : buckets_[k].entries) {
        at::Tensor& g = params_[e.param].mutable_grad();
        g.copy_(held.narrow(0, e.offset, e.numel).view_as(g));
      }
    }
    flat_[k] = at::Tensor();
  }
  finish_seconds_ = (TraceRecorder::NowUs() - start) / 1e6;
}

std::vector<at::Tensor> GradSync::grads() const {
  std::vector<at::Tensor> grads;
  for (const ParamSlice& s : slices_) {
    const at::Tensor& p = params_[s.param];
    if (!shard_) {
      grads.push_back(p.grad());
      continue;
    }
    const at::Tensor view = SliceView(p, s);
    grads.push_back(shard_buffer_[s.bucket].narrow(0, s.shard_offset, s.length).view(view.sizes()));
  }
  return grads;
}

std::pair<double, double> GradSync::SquaredNorms(const std::vector<bool>& tp_split) const {
  std::vector<at::Tensor> split, whole;
  const std::vector<at::Tensor> g = grads();
  for (size_t i = 0; i < g.size(); ++i) {
    (!tp_split.empty() && tp_split.at(slices_[i].param) ? split : whole).push_back(g[i]);
  }
  const std::pair<double, double> mine{SquaredGradNorm(split), SquaredGradNorm(whole)};
  // A stage without trainable parameters (a frozen encoder's) has nothing to add; its dp group, all on that
  // stage, skips the sum together.
  if (!shard_ || params_.empty()) return mine;
  // The shards are disjoint: their sums add up to the stage's.
  at::Tensor sum = at::tensor({mine.first, mine.second}, at::TensorOptions().dtype(at::kDouble))
                       .to(params_.front().device());
  dp_.AllReduce(sum, ReduceOp::kSum);
  const at::Tensor host = sum.cpu();
  return {host[0].item<double>(), host[1].item<double>()};
}

void GradSync::GatherParams() {
  if (!shard_) return;
  at::NoGradGuard no_grad;
  const int n = dp_.size();
  std::vector<at::Tensor> full(buckets_.size());
  std::vector<std::unique_ptr<Work>> gathers;
  for (int k = 0; k < num_buckets(); ++k) {
    const GradBucket& b = buckets_[k];
    const at::TensorOptions options = params_[b.entries.front().param].options();
    at::Tensor mine = at::zeros({b.padded / n}, options);
    for (const ParamSlice& s : slices_) {
      if (s.bucket == k) mine.narrow(0, s.shard_offset, s.length).copy_(SliceView(params_[s.param], s).reshape({-1}));
    }
    full[k] = at::empty({b.padded}, options);
    gathers.push_back(dp_.IAllGather(mine, full[k]));
  }
  for (int k = 0; k < num_buckets(); ++k) {
    gathers[k]->Wait();
    for (const GradBucket::Entry& e : buckets_[k].entries) {
      params_[e.param].view({-1}).copy_(full[k].narrow(0, e.offset, e.numel));
    }
  }
}

void GradSync::ZeroGrad() {
  for (at::Tensor& p : params_) {
    if (p.grad().defined()) p.mutable_grad().zero_();
  }
}

}  // namespace cornstarch
