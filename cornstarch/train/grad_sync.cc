#include "cornstarch/train/grad_sync.h"

#include <ATen/ATen.h>

#include "cornstarch/dist/communicator.h"

namespace cornstarch {

GradSync::GradSync(std::vector<at::Tensor> params, int64_t bucket_bytes) : params_(std::move(params)) {
  int64_t bytes = 0;
  for (int i = 0; i < static_cast<int>(params_.size()); ++i) {
    const int64_t size = params_[i].numel() * static_cast<int64_t>(params_[i].element_size());
    if (buckets_.empty() || (bytes + size > bucket_bytes && !buckets_.back().empty())) {
      buckets_.emplace_back();
      bytes = 0;
    }
    buckets_.back().push_back(i);
    bytes += size;
  }
}

void GradSync::AllReduceSum(Communicator& group) {
  if (group.size() == 1) return;
  for (const std::vector<int>& bucket : buckets_) {
    std::vector<at::Tensor> flat;
    for (int i : bucket) {
      at::Tensor& p = params_[i];
      if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p);
      flat.push_back(p.grad().reshape({-1}));
    }
    at::Tensor buffer = at::cat(flat);
    group.AllReduce(buffer, ReduceOp::kSum);
    int64_t offset = 0;
    for (int i : bucket) {
      at::Tensor& g = params_[i].mutable_grad();
      g.copy_(buffer.narrow(0, offset, g.numel()).view_as(g));
      offset += g.numel();
    }
  }
}

}  // namespace cornstarch
