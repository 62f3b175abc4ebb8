// A microbatch as the model consumes it. Built by a dataset; the LLM's input is the text tokens with each
// encoder's projected features written over that encoder's placeholder positions.
#pragma once

#include <torch/types.h>

#include <vector>

#include "cornstarch/data/cp_layout.h"

namespace cornstarch {

struct ModalityInput {
  torch::Tensor inputs;     // vision: [n, C, H, W] float; audio: [n, mel_bins, frames] float
  torch::Tensor positions;  // [n * EncoderTokens] int64: flat indices into the [B * S] LLM sequence, instance-major
  // Sequence sharded over a cp group: the feature rows whose placeholders this rank holds (positions then index
  // this rank's [B * S/cp] tokens). Undefined: every row.
  torch::Tensor rows;
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

// This cp rank's share of a whole-sequence batch under `layout`. Encoder inputs stay whole (every cp rank runs
// the encoders); only the placeholders it holds take features.
Batch ShardBatch(const Batch& full, const CpLayout& layout, int rank);

}  // namespace cornstarch
