// Token-workload balancing for context parallelism (paper section 3.2). The sequence is cut into blocks of
// `block` tokens; a block's work is the number of allowed (query, key) pairs in its rows under the bitfield mask
// (TileMask). Blocks are assigned to CP ranks, each rank getting the same number of blocks (so key/value
// all-gathers stay uniform), by one of:
//   contiguous  rank r takes the r-th run of blocks (the naive split)
//   zigzag      2*cp runs; rank r takes runs r and 2*cp-1-r (balanced for purely causal masks only)
//   balanced    longest-processing-time first onto the least-loaded rank with room (ties to the lower rank),
//               then pairwise swaps between the most and least loaded ranks while they lower the maximum; the
//               same swap pass also runs from the two baselines and the best result is kept, so balanced is
//               never worse than either.
// Pure.
#pragma once

#include <cstdint>
#include <vector>

#include "cornstarch/plan/config.h"

namespace cornstarch {

struct CpAssignment {
  std::vector<std::vector<int64_t>> blocks;  // per rank, ascending block indices
  std::vector<int64_t> work;                 // per rank
  double max_over_mean() const;
};

// Work of each block of `block` consecutive query rows.
std::vector<int64_t> BlockWork(const int64_t* words, int64_t n, int64_t block);

// REQUIRES: work.size() divisible by cp (pad the sequence to a multiple of cp * block).
CpAssignment AssignBlocks(const std::vector<int64_t>& work, int cp, CpSplit split);

}  // namespace cornstarch
