// Where each trainable parameter's gradient lives in the data-parallel reduction, and which slice of it a rank
// owns when the optimizer state is sharded (ZeRO-1, Megatron's distributed optimizer). Pure layout arithmetic: the
// tensors and collectives are train/grad_sync.h's.
//
// Buckets are filled in reverse parameter order, because backward produces the last layers' gradients first: the
// first bucket completes first and its reduction can start while backward goes on. Each bucket is padded to a
// multiple of the shard count and split into equal shards; rank r owns shard r of every bucket, so a reduce-
// scatter per bucket hands it exactly the gradient sums its optimizer slice needs, and every rank owns ~1/dp of
// the state whatever the parameter sizes.
#pragma once

#include <cstdint>
#include <vector>

namespace cornstarch {

struct GradBucket {
  struct Entry {
    int param = 0;       // index into the parameter list
    int64_t offset = 0;  // first element in the bucket
    int64_t numel = 0;
  };
  std::vector<Entry> entries;  // in bucket order (parameters descending)
  int64_t numel = 0;           // elements of the parameters
  int64_t padded = 0;          // numel rounded up to a multiple of the shard count
};

// `numels` in model order, `bytes_per_element` of the gradients; a bucket closes before exceeding `bucket_bytes`
// (a parameter larger than that gets a bucket of its own). REQUIRES: shards >= 1, bucket_bytes > 0.
std::vector<GradBucket> PlanGradBuckets(const std::vector<int64_t>& numels, int64_t bytes_per_element,
                                        int64_t bucket_bytes, int shards);

// Elements [begin, begin + length) of parameter `param` (flattened), stored at `shard_offset` in this rank's shard
// of bucket `bucket`.
struct ParamSlice {
  int param = 0;
  int64_t begin = 0, length = 0;
  int bucket = 0;
  int64_t shard_offset = 0;
};

// The slices shard `shard` of `shards` owns, bucket by bucket, in bucket order. The shards of all ranks tile every
// parameter exactly once; padding belongs to no slice.
std::vector<ParamSlice> ShardSlices(const std::vector<GradBucket>& buckets, int shard, int shards);

}  // namespace cornstarch
