// Sequence packing: which samples share each training sequence. Pure, so the plan of a whole epoch is cheap to
// compute on every rank and the same everywhere.
#pragma once

#include <cstdint>
#include <vector>

namespace cornstarch {

struct PackItem {
  int64_t length = 0;  // tokens
  int groups = 1;      // attention-mask group bits (MaskGroupsNeeded)
};

// Greedy in `order`: a sample joins the current sequence while its tokens fit in seq_len and its mask groups in
// kMaxGroups; otherwise the sequence is closed and the sample starts the next. Without `pack` every sample is its
// own sequence. Each item must fit on its own (CS_CHECK): over-long samples are the caller's to drop or report.
std::vector<std::vector<int64_t>> PackSequences(const std::vector<int64_t>& order, const std::vector<PackItem>& items,
                                                int64_t seq_len, bool pack);

// `n` indices in an order that depends only on (seed, epoch): Fisher-Yates with a fixed generator, so every
// platform and rank agrees.
std::vector<int64_t> EpochOrder(int64_t n, uint64_t seed, int64_t epoch, bool shuffle);

}  // namespace cornstarch
