#include "cornstarch/train/microbatches.h"

namespace cornstarch {

MicrobatchSlicer::MicrobatchSlicer(const TrainConfig& train, int dp_rank, int dp_size)
    : global_(train.global_batch_size),
      micro_(train.micro_batch_size),
      local_(train.global_batch_size / dp_size),
      offset_(dp_rank * local_) {}

BatchLoader::Slice MicrobatchSlicer::Request(int64_t first_step, int64_t i) const {
  const int64_t step = first_step + i / per_step();
  return {step * global_ + offset_ + (i % per_step()) * micro_, micro_};
}

}  // namespace cornstarch
