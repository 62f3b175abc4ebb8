// Which sequences this data-parallel rank trains on: each step's global batch is cut into dp contiguous slices
// of global_batch_size / dp sequences (rank r takes the r-th), and a slice into microbatches of micro_batch_size.
// Losses are normalised by the labelled tokens of the whole global batch, so the sum over microbatches and ranks
// is the one-big-batch gradient whatever the layout.
#pragma once

#include <cstdint>

#include "cornstarch/data/loader.h"
#include "cornstarch/plan/config.h"

namespace cornstarch {

class MicrobatchSlicer {
 public:
  MicrobatchSlicer(const TrainConfig& train, int dp_rank, int dp_size);

  int64_t local_batch() const { return local_; }
  int64_t per_step() const { return local_ / micro_; }
  // Request i of a loader that starts at step `first_step`: microbatch i % per_step() of step
  // first_step + i / per_step().
  BatchLoader::Slice Request(int64_t first_step, int64_t i) const;

 private:
  int64_t global_, micro_, local_, offset_;
};

}  // namespace cornstarch
