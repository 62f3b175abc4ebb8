// Model FLOPs utilisation. A batch's FLOPs are what this model executes for it: frozen-aware backward (2F for a
// trainable layer, F for a frozen one that passes gradients back, 0 otherwise), LLM attention over the pairs the
// mask allows, the LM head at the labelled positions only (the loss computes no other logits), encoders once per
// image or clip (real data has any number per sequence; images at their own resolution with their own tokens and
// attention pairs), the LLM once per sequence.
// The peak is one rank's: logging.peak_tflops when set; else on a GPU its listed dense bf16 peak, on the CPU the
// measured fp32 GEMM rate of the rank's threads (see MeasureGemmFlops), logged at start.
#pragma once

#include <c10/core/Device.h>

#include <vector>

#include "cornstarch/plan/config.h"
#include "cornstarch/plan/cost_model.h"
#include "cornstarch/plan/model_spec.h"

namespace cornstarch {

struct Batch;

double BatchFlops(const ModelConfig& config, const ModelSpec& spec, const Batch& batch);

// What `batch` holds per encoder: instances per sample and, for images at their own resolution, their mean tokens
// and attention pairs (plan/cost_model.h). What BatchFlops counts, and what the pipeline plan is costed on.
std::vector<InstanceLoad> InstanceLoads(const Batch& batch);

class MfuMeter {
 public:
  // `reports`: this rank logs the GPU and its peak (and warns when the GPU is not in the table: MFU is then 0).
  MfuMeter(const LoggingConfig& logging, const c10::Device& device, int world_size, bool reports);

  // `flops` executed by all ranks in `seconds`, as a fraction of the ranks' combined peak; 0 when it is unknown.
  double Mfu(double flops, double seconds) const;

 private:
  double peak_flops_ = 0;  // one rank's
  int world_size_ = 1;
};

}  // namespace cornstarch
