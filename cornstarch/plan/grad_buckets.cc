#include "cornstarch/plan/grad_buckets.h"

#include <algorithm>

#include "cornstarch/base/check.h"

namespace cornstarch {

std::vector<GradBucket> PlanGradBuckets(const std::vector<int64_t>& numels, int64_t bytes_per_element,
                                        int64_t bucket_bytes, int shards) {
  CS_CHECK(shards >= 1 && bucket_bytes > 0 && bytes_per_element > 0, "bucket plan: shards ", shards, ", bucket bytes ",
           bucket_bytes);
  std::vector<GradBucket> buckets;
  for (int p = static_cast<int>(numels.size()) - 1; p >= 0; --p) {
    const int64_t n = numels[static_cast<size_t>(p)];
    if (buckets.empty() ||
        (!buckets.back().entries.empty() && (buckets.back().numel + n) * bytes_per_element > bucket_bytes)) {
      buckets.emplace_back();
    }
    GradBucket& b = buckets.back();
    b.entries.push_back({p, b.numel, n});
    b.numel += n;
  }
  for (GradBucket& b : buckets) b.padded = (b.numel + shards - 1) / shards * shards;
  return buckets;
}

std::vector<ParamSlice> ShardSlices(const std::vector<GradBucket>& buckets, int shard, int shards) {
  CS_CHECK(shard >= 0 && shard < shards, "shard ", shard, " of ", shards);
  std::vector<ParamSlice> slices;
  for (int k = 0; k < static_cast<int>(buckets.size()); ++k) {
    const GradBucket& b = buckets[static_cast<size_t>(k)];
    const int64_t size = b.padded / shards, lo = shard * size, hi = lo + size;
    for (const GradBucket::Entry& e : b.entries) {
      const int64_t from = std::max(lo, e.offset), to = std::min(hi, e.offset + e.numel);
      if (from < to) slices.push_back({e.param, from - e.offset, to - from, k, from - lo});
    }
  }
  return slices;
}

}  // namespace cornstarch
