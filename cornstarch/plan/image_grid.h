// Images at their own resolution (model.encoders.<name>.dynamic_resolution) or tiled (anyres_max_tiles): how many
// patches an image of a given size becomes, and how a microbatch's images are packed into the rows the vision tower
// runs. Pure: the data layer lays out pixels and placeholders by it, the model its position tables, the cost model
// its FLOPs.
//
// Packing rather than padding every image to the largest: a row holds images one after another, each its own
// attention group in the bitfield words (plan/bitfield_mask.h), so the tiled attention kernel skips the pairs
// across images and a row costs the sum of its images' squares, not the square of their sum.
#pragma once

#include <cstdint>
#include <vector>

#include "cornstarch/plan/config.h"

namespace cornstarch {

struct PatchGrid {
  int64_t rows = 0, cols = 0;  // patches down and across
  int64_t patches() const { return rows * cols; }
  bool operator==(const PatchGrid& o) const { return rows == o.rows && cols == o.cols; }
};

// Whether `e` takes its images packed (data/batch.h's grid, patches and words): dynamic_resolution or anyres.
bool PackedTower(const EncoderConfig& e);

// anyres: the grid of rows x cols tiles (of image_size) for a width x height image, as LLaVA-NeXT's
// select_best_resolution picks it: among rows x cols <= anyres_max_tiles (1 x 1 left out when more are allowed),
// the one keeping most of the image's pixels when it is scaled to fit, then the one wasting the least area; ties
// go to fewer rows.
PatchGrid AnyresTiles(int64_t width, int64_t height, const EncoderConfig& e);

// The views a width x height image becomes in a packed tower, in the order its tokens take in the LLM: the image at
// its own resolution (dynamic_resolution), or the base view and then the tiles row by row (anyres), each an
// image_size square.
std::vector<PatchGrid> ImageViews(int64_t width, int64_t height, const EncoderConfig& e);

// The tokens a width x height image takes: its views' patches.
int64_t ImageTokens(int64_t width, int64_t height, const EncoderConfig& e);

// The most patches one image of `e` takes: max_patches, or those of an image_size square when it is 0.
int64_t MaxPatches(const EncoderConfig& e);

// The grid of a width x height image: each side rounded to the nearest multiple of patch_size (at least one patch);
// if that is more than MaxPatches, both sides scaled by the same factor and rounded down, then the longer side
// shortened until it fits (only images thinner than a patch need that).
PatchGrid DynamicGrid(int64_t width, int64_t height, const EncoderConfig& e);

// The images of one microbatch, in order, packed into `rows` rows of `length` patches: a new row starts after
// kMaxGroups images (one group bit each); the shorter rows end in padding.
struct PackedImages {
  int64_t rows = 0, length = 0;
  std::vector<int64_t> start;  // per image: its first patch in the flat [rows * length] layout
  std::vector<int64_t> words;  // [rows * length]: image k of its row has only group bit 1 + k; padding 0
};
PackedImages PackImages(const std::vector<PatchGrid>& grids);

}  // namespace cornstarch
