// Names of cornstarch's own profiler scopes (LibTorch's RecordFunction, user scope). LibTorch's profilers and
// bench/step_breakdown see a step's parts by them; a scope covers every op called inside it. Free when no profiler
// listens (RecordFunction is inactive without callbacks).
#pragma once

#include <ATen/record_function.h>

namespace cornstarch::scope {

inline constexpr char kAttention[] = "cornstarch::attention";  // the bitfield kernel, forward and backward
inline constexpr char kData[] = "cornstarch::data";            // waiting for the step's prepared microbatches
inline constexpr char kGradSync[] = "cornstarch::grad_sync";   // gradient sums left after the backward
inline constexpr char kOptimizer[] = "cornstarch::optimizer";  // grad norm, clipping, AdamW, parameter gathers

}  // namespace cornstarch::scope
