#include "cornstarch/plan/image_grid.h"

#include <algorithm>
#include <cmath>

#include "cornstarch/plan/bitfield_mask.h"

namespace cornstarch {

bool PackedTower(const EncoderConfig& e) { return e.dynamic_resolution || e.anyres_max_tiles > 0; }

PatchGrid AnyresTiles(int64_t width, int64_t height, const EncoderConfig& e) {
  const double w = static_cast<double>(width), h = static_cast<double>(height);
  const double side = static_cast<double>(e.image_size);
  PatchGrid best;
  double best_kept = -1, best_waste = 0;
  for (int64_t rows = 1; rows <= e.anyres_max_tiles; ++rows) {
    for (int64_t cols = 1; rows * cols <= e.anyres_max_tiles; ++cols) {
      if (rows * cols == 1 && e.anyres_max_tiles > 1) continue;
      const double tw = cols * side, th = rows * side, scale = std::min(tw / w, th / h);
      const double kept = std::min(std::floor(w * scale) * std::floor(h * scale), w * h);
      const double waste = tw * th - kept;
      if (kept > best_kept || (kept == best_kept && waste < best_waste)) {
        best = {rows, cols}, best_kept = kept, best_waste = waste;
      }
    }
  }
  return best;
}

std::vector<PatchGrid> ImageViews(int64_t width, int64_t height, const EncoderConfig& e) {
  if (e.dynamic_resolution) return {DynamicGrid(width, height, e)};
  const int64_t side = e.image_size / e.patch_size;
  return std::vector<PatchGrid>(1 + AnyresTiles(width, height, e).patches(), PatchGrid{side, side});
}

int64_t ImageTokens(int64_t width, int64_t height, const EncoderConfig& e) {
  int64_t tokens = 0;
  for (const PatchGrid& g : ImageViews(width, height, e)) tokens += g.patches();
  return tokens;
}

int64_t MaxPatches(const EncoderConfig& e) {
  const int64_t side = e.image_size / e.patch_size;
  return e.max_patches > 0 ? e.max_patches : side * side;
}

PatchGrid DynamicGrid(int64_t width, int64_t height, const EncoderConfig& e) {
  const double p = static_cast<double>(e.patch_size);
  const auto side = [&](double pixels) { return std::max<int64_t>(1, std::llround(pixels / p)); };
  PatchGrid g{side(static_cast<double>(height)), side(static_cast<double>(width))};
  const int64_t most = MaxPatches(e);
  if (g.patches() > most) {
    // Scaled to at most `most` patches in area; flooring each side keeps the product below it.
    const double scale = std::sqrt(static_cast<double>(most) / (static_cast<double>(width) * height / (p * p)));
    g.rows = std::max<int64_t>(1, static_cast<int64_t>(std::floor(height * scale / p)));
    g.cols = std::max<int64_t>(1, static_cast<int64_t>(std::floor(width * scale / p)));
    while (g.patches() > most) (g.rows >= g.cols ? g.rows : g.cols) -= 1;
  }
  return g;
}

PackedImages PackImages(const std::vector<PatchGrid>& grids) {
  PackedImages out;
  std::vector<std::vector<size_t>> rows;
  for (size_t i = 0; i < grids.size(); ++i) {
    if (rows.empty() || static_cast<int>(rows.back().size()) == kMaxGroups) rows.emplace_back();
    rows.back().push_back(i);
  }
  for (const auto& row : rows) {
    int64_t length = 0;
    for (size_t i : row) length += grids[i].patches();
    out.length = std::max(out.length, length);
  }
  out.rows = static_cast<int64_t>(rows.size());
  out.start.resize(grids.size());
  out.words.assign(static_cast<size_t>(out.rows * out.length), 0);
  for (int64_t r = 0; r < out.rows; ++r) {
    int64_t at = r * out.length;
    for (size_t k = 0; k < rows[r].size(); ++k) {
      const size_t i = rows[r][k];
      out.start[i] = at;
      std::fill_n(out.words.begin() + at, grids[i].patches(), int64_t{1} << (1 + k));
      at += grids[i].patches();
    }
  }
  return out;
}

}  // namespace cornstarch
