#include "cornstarch/plan/packing.h"

#include <numeric>
#include <random>

#include "cornstarch/plan/bitfield_mask.h"
#include "cornstarch/base/check.h"
#include "cornstarch/base/random.h"

namespace cornstarch {

bool JoinsSequence(int64_t tokens, int groups, const PackItem& item, int64_t seq_len, bool pack) {
  CS_CHECK(item.length >= 1 && item.length <= seq_len && item.groups >= 1 && item.groups <= kMaxGroups,
           "an item does not fit a sequence: ", item.length, " tokens, ", item.groups, " groups");
  if (tokens == 0) return true;
  return pack && tokens + item.length <= seq_len && groups + item.groups <= kMaxGroups;
}

std::vector<int64_t> EpochOrder(int64_t n, uint64_t seed, int64_t epoch, bool shuffle) {
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  if (!shuffle) return order;
  std::mt19937_64 rng(MixSeed(seed, 0x65706f6368ULL + static_cast<uint64_t>(epoch)));
  for (int64_t i = n - 1; i > 0; --i) {
    // Modulo bias is < n / 2^64: irrelevant, and unlike std::uniform_int_distribution the same everywhere.
    std::swap(order[i], order[rng() % static_cast<uint64_t>(i + 1)]);
  }
  return order;
}

}  // namespace cornstarch
