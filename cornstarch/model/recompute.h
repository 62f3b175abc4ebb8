// Activation checkpointing: a layer run through Recompute keeps only its input for backward; its forward runs
// again during backward (with the same context) to produce the gradients. Trades about one extra forward of the
// layer for the memory of its intermediate activations. The recomputed forward is the same computation on the
// same values, so the gradients equal those of the plain run.
#pragma once

#include "cornstarch/model/layer.h"

namespace cornstarch {

// REQUIRES: `layer` reads nothing with a gradient besides `x` and its own parameters (a transformer block; not
// the LLM's embed layer, which also reads the encoders' features), and `*ctx.batch` and `ctx.cp_group` outlive
// the backward pass.
torch::Tensor Recompute(Layer& layer, const torch::Tensor& x, const ForwardContext& ctx);

}  // namespace cornstarch
