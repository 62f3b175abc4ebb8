// One comparison of two runs' per-step metrics, step by step: `got` against `expected` from index `first` on
// (a resumed run continues the uninterrupted one). Tolerance 0 means bitwise; otherwise relative, the loss
// within `loss_rtol` and the grad norm within 10x that (the stages' squared norms are summed in another order).
// Tokens per step must be equal, and the evaluations (eval_loss) happen at the same steps and compare like the loss.
#pragma once

#include <catch2/catch.hpp>
#include <vector>

#include "cornstarch/train/metrics.h"

namespace cornstarch::testing {

inline void CheckSameCurve(const std::vector<StepMetrics>& got, const std::vector<StepMetrics>& expected,
                           double loss_rtol, size_t first = 0) {
  REQUIRE(first + got.size() <= expected.size());
  REQUIRE(!got.empty());
  for (size_t i = 0; i < got.size(); ++i) {
    const StepMetrics& want = expected[first + i];
    INFO("step " << got[i].step);
    CHECK(got[i].step == want.step);
    CHECK(got[i].tokens == want.tokens);
    REQUIRE(got[i].eval_loss.has_value() == want.eval_loss.has_value());
    if (loss_rtol == 0) {
      CHECK(got[i].loss == want.loss);
      CHECK(got[i].grad_norm == want.grad_norm);
      if (want.eval_loss) CHECK(*got[i].eval_loss == *want.eval_loss);
    } else {
      CHECK(got[i].loss == Approx(want.loss).epsilon(loss_rtol));
      CHECK(got[i].grad_norm == Approx(want.grad_norm).epsilon(10 * loss_rtol));
      if (want.eval_loss) CHECK(*got[i].eval_loss == Approx(*want.eval_loss).epsilon(loss_rtol));
    }
  }
}

}  // namespace cornstarch::testing
