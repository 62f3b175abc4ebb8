// A callback after a parameter's gradient has been accumulated into .grad() by backward: the moment a gradient
// bucket can start its reduction. LibTorch's stable API has only hooks that run before accumulation, so this
// attaches to the parameter's gradient accumulator node, as PyTorch's DDP reducer does; those autograd internals
// are used here and nowhere else (the one file to adapt for another LibTorch version).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>

namespace torch::autograd {
struct Node;
}

namespace cornstarch {

class GradAccumulatedHook {
 public:
  // REQUIRES: `param` is a leaf that requires grad. `fn` runs on the thread that runs backward, once per
  // accumulation, for as long as this object lives.
  GradAccumulatedHook(const at::Tensor& param, std::function<void()> fn);
  ~GradAccumulatedHook();
  GradAccumulatedHook(const GradAccumulatedHook&) = delete;
  GradAccumulatedHook& operator=(const GradAccumulatedHook&) = delete;

 private:
  // Held, not only referenced: a parameter keeps its accumulator weakly, and a new one (without the hook) would
  // replace it once the last graph using it is gone.
  std::shared_ptr<torch::autograd::Node> accumulator_;
  uintptr_t key_ = 0;
};

}  // namespace cornstarch
