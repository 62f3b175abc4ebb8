// What each layer of a model leaves held after one microbatch's forward, measured against glibc's allocator, for
// the memory tests to compare with the planner's EstimateLayerMemory (plan/cost_model.h) under its attribution:
// the tensors a layer's graph saves, and its output where the next layer's graph keeps it. Only the graphs keep
// outputs, as in a pipeline stage; after a layer without a graph, what it leaves held counts for the layer whose
// graph keeps it; an output that is a view of the layer's input (a slice) is its input's producer's storage.
#pragma once

#include <string>
#include <vector>

#include "cornstarch/data/batch.h"
#include "cornstarch/dist/communicator.h"
#include "cornstarch/model/multimodal_model.h"
#include "cornstarch/plan/config.h"

namespace cornstarch {

// The model the memory tests measure: a vision and an audio tower of 256 tokens each and a 4-layer LLM over 1024
// tokens, large enough that the allocator's own bookkeeping is small beside the tensors; `more` overrides added.
Config MemoryTestConfig(const std::string& precision, const std::vector<std::string>& more = {});

// A microbatch of counts.size() sequences of cfg.data.seq_len tokens, sample b holding counts[b][k] instances of
// encoder k one after another behind a short prompt, then a labelled answer, then padding; a packed tower's images
// take the grids of `grids` in turn. Inputs and tokens random (seeded).
Batch InstancesBatch(const Config& cfg, const std::vector<std::vector<int>>& counts,
                     const std::vector<PatchGrid>& grids);

// Every layer of `model` as tp rank `shard` holds it (built whole, then cut; with no group no collective runs).
MultimodalModel TpSlice(const ModelConfig& model, uint64_t seed, const TpShard& shard);

// What glibc's allocator holds: its in-use chunks over all arenas and its mmapped blocks.
double HeldBytes();

// Runs every layer of `model` in order on `batch` (under CPU autocast in bf16; the LM head as the fused loss, its
// output the summed loss), in the tp group `tp` and the cp group `cp` (null: none; a cp rank's batch is its
// ShardBatch), twice: the first warms up what is made once (RoPE tables, thread pools, the collectives' buffers);
// returns the second's bytes per layer. With `llm_stand_in` the LLM's embedding and head, which a tp slice can run only
// in its group, are not run (their entries are 0): the blocks start from a random stand-in for the embedding's output,
// and the last block's output counts as let go, as the head keeps only the labelled rows of its input.
std::vector<double> HeldPerLayer(MultimodalModel& model, const Batch& batch, Communicator* tp, Precision precision,
                                 bool llm_stand_in, Communicator* cp = nullptr);

}  // namespace cornstarch
