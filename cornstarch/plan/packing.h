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

// Greedy packing, one sample at a time: whether `item` joins a sequence that holds `tokens` tokens and `groups`
// mask-group bits so far (else that sequence is closed and the item starts the next). It joins while its tokens
// fit in seq_len and its groups in kMaxGroups; without `pack` only an empty sequence takes it. The item must fit
// on its own (CS_CHECK): over-long samples are the caller's to drop or report.
bool JoinsSequence(int64_t tokens, int groups, const PackItem& item, int64_t seq_len, bool pack);

// `n` indices in an order that depends only on (seed, epoch): Fisher-Yates with a fixed generator, so every
// platform and rank agrees.
std::vector<int64_t> EpochOrder(int64_t n, uint64_t seed, int64_t epoch, bool shuffle);

}  // namespace cornstarch
