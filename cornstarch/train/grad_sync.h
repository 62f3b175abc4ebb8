// Data-parallel gradient synchronisation: the trainable parameters' gradients are flattened into buckets of at
// most `bucket_bytes` and all-reduced (sum) bucket by bucket, so a step makes few, large calls. Frozen parameters
// are never in the list, so they are never communicated.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace cornstarch {

class Communicator;

class GradSync {
 public:
  GradSync(std::vector<at::Tensor> params, int64_t bucket_bytes);

  // Sums every gradient over `group` in place. Parameters without a gradient contribute zeros.
  void AllReduceSum(Communicator& group);

  int num_buckets() const { return static_cast<int>(buckets_.size()); }

 private:
  std::vector<at::Tensor> params_;
  std::vector<std::vector<int>> buckets_;  // parameter indices per bucket, in order
};

}  // namespace cornstarch
