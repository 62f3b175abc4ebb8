// The pipeline plan every rank executes, identical everywhere: the frozen-aware layer costs of one microbatch,
// either profiled (parallel.pipeline_costs: profile with pp > 1: rank 0 times every layer's forward and the others
// receive its numbers, since timings differ from rank to rank) or FLOP-estimated, placed on the pp stages as
// parallel.pipeline says (plan/planner.h). The encoders are costed on what the data holds: rank 0 reads its first
// step's sequences and counts the media per sample and, for images at their own resolution, their mean tokens and
// attention pairs (train/mfu.h's InstanceLoads); the others receive its numbers.
#pragma once

#include "cornstarch/plan/config.h"
#include "cornstarch/plan/model_spec.h"
#include "cornstarch/plan/planner.h"

namespace cornstarch {

class Dataset;
class DistRuntime;

// Collective over the world when pp > 1.
PipelinePlan BuildPipelinePlan(const Config& config, const ModelSpec& spec, DistRuntime& runtime, const Dataset& data);

}  // namespace cornstarch
