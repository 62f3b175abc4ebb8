// The pipeline plan every rank executes, identical everywhere: the frozen-aware layer costs of one microbatch,
// either profiled (parallel.pipeline_costs: profile with pp > 1: rank 0 times every layer's forward and the others
// receive its numbers, since timings differ from rank to rank) or FLOP-estimated, placed on the pp stages as
// parallel.pipeline says (plan/planner.h). The encoders are costed on what the data holds: rank 0 reads its first
// step's sequences and counts the media per sample and, for images at their own resolution, their mean tokens and
// attention pairs (train/mfu.h's InstanceLoads); the others receive its numbers.
#pragma once

#include <string>
#include <vector>

#include "cornstarch/plan/config.h"
#include "cornstarch/plan/cost_model.h"
#include "cornstarch/plan/model_spec.h"
#include "cornstarch/plan/planner.h"

namespace cornstarch {

class Dataset;
class DistRuntime;

// Collective over the world when pp > 1.
PipelinePlan BuildPipelinePlan(const Config& config, const ModelSpec& spec, DistRuntime& runtime, const Dataset& data);

// What `data` holds per encoder, from its first step's sequences (InstanceLoads of a data-parallel rank's share of
// train.global_batch_size, at most 64): the same in every process that reads them.
std::vector<InstanceLoad> FirstStepLoads(const Config& config, const Dataset& data);

// "vision 2.50 per sample x 118.8 tokens, audio 1.00 per sample x 256 tokens", for the tools' logs.
std::string DescribeLoads(const ModelConfig& model, const std::vector<InstanceLoad>& loads);

}  // namespace cornstarch
