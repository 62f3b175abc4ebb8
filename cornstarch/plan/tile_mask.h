// The bitfield mask seen at tile granularity: for each (query tile, key tile) of one sequence, how many (i, j)
// pairs are allowed. Tiles with none are skipped by the attention kernels, tiles with all allowed need no
// per-element mask, and the counts are the attention work that context-parallel balancing equalises. Pure.
#pragma once

#include <cstdint>
#include <vector>

namespace cornstarch {

enum class TileClass : uint8_t { kEmpty = 0, kPartial = 1, kFull = 2 };

// The smallest block of positions [row_begin, row_end) x [col_begin, col_end) that holds every allowed pair of a
// tile; all four are 0 for an empty tile.
struct TileBounds {
  int32_t row_begin = 0, row_end = 0, col_begin = 0, col_end = 0;
};

class TileMask {
 public:
  // `words`: the n mask words of one sequence. The last tile of each axis may be short.
  TileMask(const int64_t* words, int64_t n, int64_t tile_q, int64_t tile_k);

  int64_t num_q_tiles() const { return nq_; }
  int64_t num_k_tiles() const { return nk_; }
  int64_t tile_q() const { return tq_; }
  int64_t tile_k() const { return tk_; }

  int64_t count(int64_t qt, int64_t kt) const { return counts_[qt * nk_ + kt]; }
  TileClass cls(int64_t qt, int64_t kt) const;
  // Smaller than the tile where a span boundary inside it leaves rows or columns with nothing allowed: a modality
  // that does not start on a tile boundary. The kernels then skip those rows and columns.
  const TileBounds& bounds(int64_t qt, int64_t kt) const { return bounds_[qt * nk_ + kt]; }

  // Key tiles with something allowed for query tile qt, ascending; and query tiles for key tile kt.
  const std::vector<int32_t>& keys_of(int64_t qt) const { return keys_of_[qt]; }
  const std::vector<int32_t>& queries_of(int64_t kt) const { return queries_of_[kt]; }

  int64_t nonempty_tiles() const;
  int64_t allowed_pairs() const;  // sum of all counts
  int64_t row_allowed(int64_t qt) const;  // allowed pairs in the rows of query tile qt

 private:
  int64_t n_, tq_, tk_, nq_, nk_;
  std::vector<int64_t> counts_;
  std::vector<TileBounds> bounds_;
  std::vector<std::vector<int32_t>> keys_of_, queries_of_;
};

}  // namespace cornstarch
