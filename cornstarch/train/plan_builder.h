// The pipeline plan every rank executes, identical everywhere: the frozen-aware layer costs of one microbatch,
// either profiled (parallel.pipeline_costs: profile with pp > 1: rank 0 times every layer's forward and the others
// receive its numbers, since timings differ from rank to rank) or FLOP-estimated, placed on the pp stages as
// parallel.pipeline says (plan/planner.h).
#pragma once

#include "cornstarch/plan/config.h"
#include "cornstarch/plan/model_spec.h"
#include "cornstarch/plan/planner.h"

namespace cornstarch {

class DistRuntime;

// Collective over the world when profiling.
PipelinePlan BuildPipelinePlan(const Config& config, const ModelSpec& spec, DistRuntime& runtime);

}  // namespace cornstarch
