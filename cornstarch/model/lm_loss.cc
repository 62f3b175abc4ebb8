#include "cornstarch/model/lm_loss.h"

#include <torch/torch.h>

#include "cornstarch/base/check.h"
#include "cornstarch/dist/communicator.h"

namespace cornstarch {

namespace {

class LinearCrossEntropyFunction : public torch::autograd::Function<LinearCrossEntropyFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& hidden,
                               const torch::Tensor& weight, const torch::Tensor& labels, int64_t chunk_rows,
                               bool need_hidden, bool need_weight, int64_t tp_comm, int64_t vocab_begin) {
    torch::NoGradGuard no_grad;
    auto* tp = reinterpret_cast<Communicator*>(tp_comm);
    const int64_t m = hidden.size(0);
    torch::Tensor loss = torch::zeros({}, hidden.options().dtype(torch::kFloat));
    torch::Tensor d_hidden = need_hidden ? torch::empty_like(hidden) : torch::Tensor();
    // Written whole by the first chunk's product, not zeroed first (a pass over the head's weight fewer), unless
    // there is no chunk.
    torch::Tensor d_weight;
    if (need_weight) d_weight = m > 0 ? torch::empty_like(weight) : torch::zeros_like(weight);
    for (int64_t r = 0; r < m; r += chunk_rows) {
      const int64_t rows = std::min(chunk_rows, m - r);
      const torch::Tensor h = hidden.narrow(0, r, rows);
      torch::Tensor logits = torch::mm(h, weight.t()).to(torch::kFloat);  // [rows, vocab slice], the only copy
      torch::Tensor target = labels.narrow(0, r, rows).unsqueeze(1);
      torch::Tensor lse, one_hot;  // log-sum-exp over the whole vocabulary; the target's weight in this slice
      if (tp == nullptr) {
        lse = torch::logsumexp(logits, 1, /*keepdim=*/true);
        loss += (lse - logits.gather(1, target)).sum();
        one_hot = torch::ones({rows, 1}, logits.options());
      } else {
        // The slices' maximum, then their sums of exponentials and the target's logit (held by one slice).
        torch::Tensor max = logits.amax(1, /*keepdim=*/true);
        tp->AllReduce(max, ReduceOp::kMax);
        target = target - vocab_begin;
        one_hot = (target >= 0).logical_and(target < logits.size(1)).to(torch::kFloat);
        target = target.clamp(0, logits.size(1) - 1);
        torch::Tensor sums = torch::cat({(logits - max).exp().sum(1, /*keepdim=*/true),
                                         logits.gather(1, target) * one_hot}, 1);
        tp->AllReduce(sums, ReduceOp::kSum);
        lse = max + sums.narrow(1, 0, 1).log();
        loss += (lse - sums.narrow(1, 1, 1)).sum();
      }
      if (!need_hidden && !need_weight) continue;
      // d loss / d logits = softmax - one_hot(target), made in place of the logits.
      torch::Tensor& g = logits.sub_(lse).exp_();
      g.scatter_add_(1, target, -one_hot);
      const torch::Tensor gw = g.to(weight.scalar_type());
      if (need_hidden) {
        torch::Tensor out = d_hidden.narrow(0, r, rows);  // rows of a contiguous tensor: contiguous
        torch::mm_out(out, gw, weight);
      }
      if (need_weight && r == 0) {
        torch::mm_out(d_weight, gw.t(), h);
      } else if (need_weight) {
        d_weight.addmm_(gw.t(), h);
      }
    }
    ctx->saved_data["d_hidden"] = d_hidden;
    ctx->saved_data["d_weight"] = d_weight;
    return loss;
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const torch::Tensor scale = grads[0];
    torch::Tensor d_hidden = ctx->saved_data["d_hidden"].toTensor();
    torch::Tensor d_weight = ctx->saved_data["d_weight"].toTensor();
    ctx->saved_data.clear();  // once: the stored gradients are scaled in place
    if (d_hidden.defined()) d_hidden.mul_(scale);
    if (d_weight.defined()) d_weight.mul_(scale);
    return {d_hidden,        d_weight,        torch::Tensor(), torch::Tensor(), torch::Tensor(),
            torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor LinearCrossEntropySum(const torch::Tensor& hidden, const torch::Tensor& weight,
                                    const torch::Tensor& labels, int64_t chunk_rows, Communicator* tp,
                                    int64_t vocab_begin) {
  CS_CHECK(hidden.dim() == 2 && weight.dim() == 2 && hidden.size(1) == weight.size(1), "hidden ", hidden.sizes(),
           " and head weight ", weight.sizes(), " do not multiply");
  CS_CHECK(labels.dim() == 1 && labels.size(0) == hidden.size(0), labels.size(0), " labels for ", hidden.size(0),
           " rows");
  CS_CHECK(chunk_rows > 0, "chunk_rows ", chunk_rows);
  // Which gradients to make, decided here: LibTorch 1.13's needs_input_grad fails when nothing needs one.
  const bool grad = torch::GradMode::is_enabled();
  if (tp != nullptr && tp->size() == 1) tp = nullptr;
  return LinearCrossEntropyFunction::apply(hidden, weight, labels, chunk_rows, grad && hidden.requires_grad(),
                                           grad && weight.requires_grad(), reinterpret_cast<int64_t>(tp),
                                           vocab_begin);
}

}  // namespace cornstarch
