#include "cornstarch/model/recompute.h"

#include <torch/autograd.h>

#include <memory>
#include <vector>

#include "cornstarch/device/autocast.h"

namespace cornstarch {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// What backward needs besides the saved input; held by the autograd context as a capsule.
struct RecomputeState : torch::CustomClassHolder {
  Layer* layer = nullptr;
  ForwardContext ctx;
  bool input_requires_grad = false;
  size_t num_params = 0;
  // Autocast as the forward ran: backward runs outside it, so the re-run restores it (else a bf16 forward would be
  // recomputed, and differentiated, in fp32).
  c10::DeviceType device = c10::DeviceType::CPU;
  AutocastState autocast;
};

// Inputs: x, then the layer's trainable parameters. The parameters are inputs only so that the output requires
// grad whenever the layer trains (even when x does not); their gradients are accumulated by the recomputed
// graph's backward, so none is returned for them.
class RecomputeFunction : public torch::autograd::Function<RecomputeFunction> {
 public:
  static torch::Tensor forward(AutogradContext* actx, const torch::Tensor& x, torch::TensorList params,
                               c10::intrusive_ptr<RecomputeState> state) {
    state->input_requires_grad = x.requires_grad();
    state->num_params = params.size();
    actx->save_for_backward({x});
    torch::Tensor y = state->layer->Forward(x, state->ctx);  // grad mode is off here: nothing is recorded
    actx->saved_data["state"] = c10::IValue::make_capsule(std::move(state));
    return y;
  }

  static variable_list backward(AutogradContext* actx, variable_list grad_out) {
    const auto state = c10::static_intrusive_pointer_cast<RecomputeState>(actx->saved_data["state"].toCapsule());
    variable_list grads(1 + state->num_params + 1);  // x, each parameter, the state (never a gradient)
    if (!grad_out[0].defined()) return grads;
    torch::Tensor x = actx->get_saved_variables()[0].detach().requires_grad_(state->input_requires_grad);
    torch::Tensor y;
    {
      torch::AutoGradMode enable(true);
      AutocastGuard autocast(state->device, state->autocast);
      y = state->layer->Forward(x, state->ctx);
    }
    torch::autograd::backward({y}, {grad_out[0]});
    if (state->input_requires_grad) grads[0] = x.grad();
    return grads;
  }
};

}  // namespace

torch::Tensor Recompute(Layer& layer, const torch::Tensor& x, const ForwardContext& ctx) {
  auto state = c10::make_intrusive<RecomputeState>();
  state->layer = &layer;
  state->ctx = ctx;
  state->ctx.features.clear();  // not read by the layers recomputed here; would only be kept alive
  state->device = x.device().type();
  state->autocast = CurrentAutocast(state->device);
  std::vector<torch::Tensor> params;
  for (const torch::Tensor& p : layer.parameters()) {
    if (p.requires_grad()) params.push_back(p);
  }
  return RecomputeFunction::apply(x, torch::TensorList(params), std::move(state));
}

}  // namespace cornstarch
