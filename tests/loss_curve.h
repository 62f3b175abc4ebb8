// One comparison of two runs' per-step metrics, step by step: `got` against `expected` from index `first` on
// (a resumed run continues the uninterrupted one). Tolerance 0 means bitwise; otherwise relative, the loss
// within `loss_rtol` and the grad norm within 10x that (the stages' squared norms are summed in another order).
// Tokens per step must be equal.
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
    if (loss_rtol == 0) {
      CHECK(got[i].loss == want.loss);
      CHECK(got[i].grad_norm == want.grad_norm);
    } else {
      CHECK(got[i].loss == Approx(want.loss).epsilon(loss_rtol));
      CHECK(got[i].grad_norm == Approx(want.grad_norm).epsilon(10 * loss_rtol));
    }
  }
}

}  // namespace cornstarch::testing
