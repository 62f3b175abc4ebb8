// Validation: forward only over held-out batches at the configured steps, reproducible, equal to the model's loss
// on those batches computed directly (an independent reference: the whole model's logits, no executor), and never
// the training batches.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <cmath>

#include "cornstarch/data/dataset.h"
#include "cornstarch/model/multimodal_model.h"
#include "cornstarch/plan/config.h"
#include "cornstarch/train/trainer.h"

using namespace cornstarch;

namespace {

Config TinyConfig(std::vector<std::string> overrides) {
  overrides.insert(overrides.end(), {"logging.metrics_path=", "logging.level=warn", "train.num_threads=1"});
  return LoadConfig("configs/tiny.yaml", overrides);
}

}  // namespace

TEST_CASE("evaluation runs every eval.interval steps and at the end, on the same batches each time", "[eval]") {
  Trainer t(TinyConfig({"train.steps=4", "optimizer.warmup_steps=1", "eval.interval=3", "eval.steps=2",
                        "eval.at_end=true"}));
  const double before = t.Evaluate();
  CHECK(std::isfinite(before));
  CHECK(t.Evaluate() == before);  // the same weights and batches: exactly the same loss
  const std::vector<StepMetrics> h = t.Run();
  REQUIRE(h.size() == 4);
  CHECK_FALSE(h[0].eval_loss);
  CHECK_FALSE(h[1].eval_loss);
  REQUIRE(h[2].eval_loss);  // step 3: the interval
  REQUIRE(h[3].eval_loss);  // step 4: the end
  CHECK(*h[3].eval_loss == t.Evaluate());  // evaluating changes nothing, and the final weights give this loss
  CHECK(*h[2].eval_loss != *h[3].eval_loss);
  CHECK(h[3].eval_ppl() == Approx(std::exp(*h[3].eval_loss)).epsilon(1e-12));
}

TEST_CASE("the evaluation is the model's loss per labelled token over the held-out batches", "[eval]") {
  const Config c = TinyConfig({"train.steps=1", "optimizer.warmup_steps=0", "eval.at_end=true", "eval.steps=2"});
  Trainer t(c);
  const auto seed = static_cast<uint64_t>(c.train.seed);
  const std::unique_ptr<Dataset> eval = MakeDataset(c, seed, DataRole::kEval);
  double loss = 0, targets = 0;
  {
    torch::NoGradGuard no_grad;
    for (int64_t step = 0; step < c.eval.steps; ++step) {
      for (int64_t m = 0; m < c.train.global_batch_size / c.train.micro_batch_size; ++m) {
        const Batch b = eval->Get(step * c.train.global_batch_size + m * c.train.micro_batch_size,
                                  c.train.micro_batch_size);
        loss += MultimodalModel::TokenLossSum(t.model().Logits(b), b.labels).item<double>();
        targets += b.labels.ne(-100).sum().item<double>();
      }
    }
  }
  CHECK(t.Evaluate() == Approx(loss / targets).epsilon(1e-6));
  // Held out: evaluation never reads the training samples.
  const std::unique_ptr<Dataset> train = MakeDataset(c, seed);
  CHECK_FALSE(torch::equal(train->Get(0, 4).input_ids, eval->Get(0, 4).input_ids));
}
