#include "cornstarch/train/grad_hooks.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "cornstarch/base/check.h"

namespace cornstarch {

namespace {

class CallbackPostHook final : public torch::autograd::FunctionPostHook {
 public:
  explicit CallbackPostHook(std::function<void()> fn) : fn_(std::move(fn)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& grads) override {
    // The engine also runs the accumulator with no gradient at all: a recomputed layer's outer node hands its
    // parameters none (the re-run graph's own backward accumulated them). Nothing was accumulated then.
    if (!grads.empty() && grads[0].defined()) fn_();
    return outputs;
  }

 private:
  std::function<void()> fn_;
};

}  // namespace

GradAccumulatedHook::GradAccumulatedHook(const at::Tensor& param, std::function<void()> fn) {
  CS_CHECK(param.is_leaf() && param.requires_grad(), "a gradient hook needs a leaf that requires grad");
  accumulator_ = torch::autograd::impl::grad_accumulator(param);
  CS_CHECK(accumulator_, "no gradient accumulator for a parameter");
  key_ = accumulator_->add_post_hook(std::make_unique<CallbackPostHook>(std::move(fn)));
}

GradAccumulatedHook::~GradAccumulatedHook() { accumulator_->del_post_hook(key_); }

}  // namespace cornstarch
