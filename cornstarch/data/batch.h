// A microbatch as the model consumes it. Built by a dataset; the LLM's input is the text tokens with each
// encoder's projected features written over that encoder's placeholder positions.
#pragma once

#include <torch/types.h>

#include <vector>

#include "cornstarch/data/cp_layout.h"
#include "cornstarch/plan/image_grid.h"

namespace cornstarch {

struct ModalityInput {
  // vision: [n, C, H, W] float; audio: [n, mel_bins, frames] float. A packed tower's (dynamic_resolution, anyres):
  // the images' views' patches packed into R rows of T, [R, T, C * P * P] (plan/image_grid.h), described by the
  // three below.
  torch::Tensor inputs;
  // Flat indices into the [B * S] LLM sequence, instance-major: [n * EncoderTokens] int64, or in a packed tower
  // one per patch of every view.
  torch::Tensor positions;
  // Sequence sharded over a cp group: the feature rows whose placeholders this rank holds (positions then index
  // this rank's [B * S/cp] tokens). Undefined: every row.
  torch::Tensor rows;
  // A packed tower only (else undefined): each view's patch grid [n, 2] int64 (rows, columns), a view being an
  // image at its own resolution or an anyres base view or tile; where its patches lie in the flat [R * T] rows,
  // view-major, patches row by row [sum of patches] int64; and the tower's attention words [R, T] int64 (each view
  // its own group, padding 0).
  torch::Tensor grid, patches, words;
};

struct Batch {
  torch::Tensor input_ids;   // [B, S] int64
  torch::Tensor labels;      // [B, S] int64: target of position t (already shifted); -100 where no loss
  torch::Tensor positions;   // [B, S] int64 RoPE positions
  torch::Tensor mask_words;  // [B, S] int64 bitfield attention words (plan/bitfield_mask.h)
  std::vector<ModalityInput> modalities;  // one per encoder, in config order
  // Context parallelism: which tokens each cp rank holds. With cp > 1, input_ids, labels and positions hold this
  // rank's tokens only ([B, S/cp]) while mask_words stays whole: attention needs every key's word.
  CpLayout cp;

  // Every tensor on `device` (the cp layout stays on the host: only planning code reads it).
  Batch To(const c10::Device& device) const;

  int64_t batch_size() const { return input_ids.size(0); }
  int64_t seq_len() const { return input_ids.size(1); }
};

// A packed tower's input from its views' patches, one view after another ([sum of the grids' patches, C * P * P]),
// packed as PackImages lays them out; `positions` left for the caller.
ModalityInput PackPatches(const torch::Tensor& patches, const std::vector<PatchGrid>& grids);

// This cp rank's share of a whole-sequence batch under `layout`. Encoder inputs stay whole (every cp rank runs
// the encoders); only the placeholders it holds take features.
Batch ShardBatch(const Batch& full, const CpLayout& layout, int rank);

}  // namespace cornstarch
