#include "cornstarch/plan/tile_mask.h"

#include <algorithm>

#include "cornstarch/plan/bitfield_mask.h"
#include "cornstarch/base/check.h"

namespace cornstarch {

TileMask::TileMask(const int64_t* words, int64_t n, int64_t tile_q, int64_t tile_k)
    : n_(n), tq_(tile_q), tk_(tile_k), nq_((n + tile_q - 1) / tile_q), nk_((n + tile_k - 1) / tile_k) {
  CS_CHECK(n >= 0 && tile_q > 0 && tile_k > 0, "n=", n, " tiles ", tile_q, "x", tile_k);
  counts_.assign(nq_ * nk_, 0);
  keys_of_.resize(nq_);
  queries_of_.resize(nk_);
  // Whether i may attend j depends only on (w_i, w_j) and, for text rows, on j <= i. So count by distinct word:
  // prefix[u][t] = how many of the first t tokens carry word u. O(n * key tiles * distinct words) instead of n^2.
  std::vector<int64_t> distinct(words, words + n);
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  const size_t u_count = distinct.size();
  // occurrences[u]: the positions of word u, ascending; the c-th is the first one at or after a position t with
  // prefix[u][t] = c. So a tile's first and last allowed column come with its count.
  std::vector<std::vector<int32_t>> prefix(u_count, std::vector<int32_t>(n + 1, 0)), occurrences(u_count);
  for (int64_t t = 0; t < n; ++t) {
    const size_t u = std::lower_bound(distinct.begin(), distinct.end(), words[t]) - distinct.begin();
    for (size_t v = 0; v < u_count; ++v) prefix[v][t + 1] = prefix[v][t] + (v == u);
    occurrences[u].push_back(static_cast<int32_t>(t));
  }
  bounds_.assign(nq_ * nk_, TileBounds{});
  std::vector<size_t> partners;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t wi = words[i];
    const bool text = (wi & kTextBit) != 0;
    partners.clear();
    for (size_t v = 0; v < u_count; ++v) {
      // Text rows: the bit test; modality rows: the rule does not depend on positions.
      if (text ? (wi & distinct[v] & kGroupMask) != 0 : MaskAllows(wi, distinct[v], 0, 0)) partners.push_back(v);
    }
    if (partners.empty()) continue;
    int64_t* row = &counts_[(i / tq_) * nk_];
    TileBounds* row_bounds = &bounds_[(i / tq_) * nk_];
    const int64_t limit = text ? i + 1 : n;  // causal: keys j <= i only
    for (int64_t kt = 0; kt * tk_ < limit; ++kt) {
      const int64_t a = kt * tk_, b = std::min(a + tk_, limit);
      TileBounds& box = row_bounds[kt];
      for (size_t v : partners) {
        const int32_t first = prefix[v][a], end = prefix[v][b];
        if (first == end) continue;
        const int32_t lo = occurrences[v][first], hi = occurrences[v][end - 1] + 1;
        if (row[kt] == 0) box = {static_cast<int32_t>(i), static_cast<int32_t>(i), lo, hi};  // the tile's first
        box.row_end = static_cast<int32_t>(i + 1);
        box.col_begin = std::min(box.col_begin, lo), box.col_end = std::max(box.col_end, hi);
        row[kt] += end - first;
      }
    }
  }
  for (int64_t qt = 0; qt < nq_; ++qt) {
    for (int64_t kt = 0; kt < nk_; ++kt) {
      if (counts_[qt * nk_ + kt] == 0) continue;
      keys_of_[qt].push_back(static_cast<int32_t>(kt));
      queries_of_[kt].push_back(static_cast<int32_t>(qt));
    }
  }
}

TileClass TileMask::cls(int64_t qt, int64_t kt) const {
  const int64_t c = count(qt, kt);
  if (c == 0) return TileClass::kEmpty;
  const int64_t rows = std::min(tq_, n_ - qt * tq_), cols = std::min(tk_, n_ - kt * tk_);
  return c == rows * cols ? TileClass::kFull : TileClass::kPartial;
}

int64_t TileMask::nonempty_tiles() const {
  int64_t total = 0;
  for (const auto& keys : keys_of_) total += static_cast<int64_t>(keys.size());
  return total;
}

int64_t TileMask::allowed_pairs() const {
  int64_t total = 0;
  for (int64_t c : counts_) total += c;
  return total;
}

int64_t TileMask::row_allowed(int64_t qt) const {
  int64_t total = 0;
  for (int64_t kt = 0; kt < nk_; ++kt) total += count(qt, kt);
  return total;
}

}  // namespace cornstarch
