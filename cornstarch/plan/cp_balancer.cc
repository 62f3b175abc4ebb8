#include "cornstarch/plan/cp_balancer.h"

#include <algorithm>
#include <numeric>

#include "cornstarch/plan/tile_mask.h"
#include "cornstarch/base/check.h"

namespace cornstarch {

double CpAssignment::max_over_mean() const {
  const double total = std::accumulate(work.begin(), work.end(), 0.0);
  if (total == 0) return 1.0;
  return *std::max_element(work.begin(), work.end()) / (total / work.size());
}

std::vector<int64_t> BlockWork(const int64_t* words, int64_t n, int64_t block) {
  const TileMask tiles(words, n, block, std::max<int64_t>(n, 1));
  std::vector<int64_t> work(tiles.num_q_tiles());
  for (int64_t b = 0; b < tiles.num_q_tiles(); ++b) work[b] = tiles.row_allowed(b);
  return work;
}

namespace {

CpAssignment FromOwner(const std::vector<int64_t>& work, const std::vector<int>& owner, int cp) {
  CpAssignment a;
  a.blocks.resize(cp);
  a.work.assign(cp, 0);
  for (size_t b = 0; b < work.size(); ++b) {
    a.blocks[owner[b]].push_back(static_cast<int64_t>(b));
    a.work[owner[b]] += work[b];
  }
  return a;
}

// Runs of `runs` near-equal lengths over nb blocks; owner_of_run maps run -> rank.
std::vector<int> Runs(size_t nb, int runs, const std::vector<int>& owner_of_run) {
  std::vector<int> owner(nb);
  for (size_t b = 0; b < nb; ++b) owner[b] = owner_of_run[b * runs / nb];
  return owner;
}

// Swaps a block of the most loaded rank with one of the least loaded rank while that lowers the larger of the
// two loads (block counts stay equal).
void Refine(const std::vector<int64_t>& work, std::vector<int>& owner, int cp) {
  for (int iter = 0; iter < 10000; ++iter) {
    std::vector<int64_t> load(cp, 0);
    for (size_t b = 0; b < work.size(); ++b) load[owner[b]] += work[b];
    const int hi = static_cast<int>(std::max_element(load.begin(), load.end()) - load.begin());
    const int lo = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    const int64_t gap = load[hi] - load[lo];
    int64_t best_gain = 0;
    size_t best_x = 0, best_y = 0;
    for (size_t x = 0; x < work.size(); ++x) {
      if (owner[x] != hi) continue;
      for (size_t y = 0; y < work.size(); ++y) {
        if (owner[y] != lo) continue;
        const int64_t delta = work[x] - work[y];  // moves from hi to lo
        if (delta <= 0 || delta >= gap) continue;
        const int64_t gain = gap - std::abs(gap - 2 * delta);  // reduction of the pair's larger load, doubled
        if (gain > best_gain) best_gain = gain, best_x = x, best_y = y;
      }
    }
    if (best_gain == 0) return;
    std::swap(owner[best_x], owner[best_y]);
  }
}

}  // namespace

CpAssignment AssignBlocks(const std::vector<int64_t>& work, int cp, CpSplit split) {
  const size_t nb = work.size();
  CS_CHECK(cp >= 1 && nb % cp == 0, nb, " blocks do not split evenly over cp=", cp);
  std::vector<int> contiguous_runs(cp), zigzag_runs(2 * cp);
  for (int r = 0; r < cp; ++r) contiguous_runs[r] = r, zigzag_runs[r] = r, zigzag_runs[2 * cp - 1 - r] = r;
  std::vector<int> contiguous = Runs(nb, cp, contiguous_runs);
  std::vector<int> zigzag = nb >= static_cast<size_t>(2 * cp) ? Runs(nb, 2 * cp, zigzag_runs) : contiguous;
  if (split == CpSplit::kContiguous) return FromOwner(work, contiguous, cp);
  if (split == CpSplit::kZigzag) return FromOwner(work, zigzag, cp);

  // LPT with equal block counts.
  std::vector<size_t> order(nb);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return work[a] > work[b]; });
  std::vector<int> lpt(nb);
  std::vector<int64_t> load(cp, 0);
  std::vector<size_t> count(cp, 0);
  for (size_t b : order) {
    int target = -1;
    for (int r = 0; r < cp; ++r) {
      if (count[r] < nb / cp && (target < 0 || load[r] < load[target])) target = r;
    }
    lpt[b] = target;
    load[target] += work[b];
    ++count[target];
  }
  CpAssignment best;
  double best_ratio = 0;
  for (std::vector<int>* start : {&lpt, &zigzag, &contiguous}) {
    Refine(work, *start, cp);
    CpAssignment a = FromOwner(work, *start, cp);
    if (best.blocks.empty() || a.max_over_mean() < best_ratio) best_ratio = a.max_over_mean(), best = std::move(a);
  }
  return best;
}

}  // namespace cornstarch
