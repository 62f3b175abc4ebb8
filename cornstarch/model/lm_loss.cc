#include "cornstarch/model/lm_loss.h"

#include <torch/torch.h>

#include "cornstarch/base/check.h"

namespace cornstarch {

namespace {

class LinearCrossEntropyFunction : public torch::autograd::Function<LinearCrossEntropyFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& hidden,
                               const torch::Tensor& weight, const torch::Tensor& labels, int64_t chunk_rows,
                               bool need_hidden, bool need_weight) {
    torch::NoGradGuard no_grad;
    const int64_t m = hidden.size(0);
    torch::Tensor loss = torch::zeros({}, hidden.options().dtype(torch::kFloat));
    torch::Tensor d_hidden = need_hidden ? torch::empty_like(hidden) : torch::Tensor();
    torch::Tensor d_weight = need_weight ? torch::zeros_like(weight) : torch::Tensor();
    for (int64_t r = 0; r < m; r += chunk_rows) {
      const int64_t rows = std::min(chunk_rows, m - r);
      const torch::Tensor h = hidden.narrow(0, r, rows);
      const torch::Tensor target = labels.narrow(0, r, rows).unsqueeze(1);
      torch::Tensor logits = torch::mm(h, weight.t()).to(torch::kFloat);  // [rows, vocab], the only copy
      const torch::Tensor lse = torch::logsumexp(logits, 1, /*keepdim=*/true);
      loss += (lse - logits.gather(1, target)).sum();
      if (!need_hidden && !need_weight) continue;
      // d loss / d logits = softmax - one_hot(target), made in place of the logits.
      torch::Tensor& g = logits.sub_(lse).exp_();
      g.scatter_add_(1, target, torch::full({rows, 1}, -1.0f, g.options()));
      const torch::Tensor gw = g.to(weight.scalar_type());
      if (need_hidden) {
        torch::Tensor out = d_hidden.narrow(0, r, rows);  // rows of a contiguous tensor: contiguous
        torch::mm_out(out, gw, weight);
      }
      if (need_weight) d_weight.addmm_(gw.t(), h);
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
    return {d_hidden, d_weight, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor LinearCrossEntropySum(const torch::Tensor& hidden, const torch::Tensor& weight,
                                    const torch::Tensor& labels, int64_t chunk_rows) {
  CS_CHECK(hidden.dim() == 2 && weight.dim() == 2 && hidden.size(1) == weight.size(1), "hidden ", hidden.sizes(),
           " and head weight ", weight.sizes(), " do not multiply");
  CS_CHECK(labels.dim() == 1 && labels.size(0) == hidden.size(0), labels.size(0), " labels for ", hidden.size(0),
           " rows");
  CS_CHECK(chunk_rows > 0, "chunk_rows ", chunk_rows);
  // Which gradients to make, decided here: LibTorch 1.13's needs_input_grad fails when nothing needs one.
  const bool grad = torch::GradMode::is_enabled();
  return LinearCrossEntropyFunction::apply(hidden, weight, labels, chunk_rows, grad && hidden.requires_grad(),
                                           grad && weight.requires_grad());
}

}  // namespace cornstarch
