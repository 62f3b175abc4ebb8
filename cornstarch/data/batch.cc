#include "cornstarch/data/batch.h"

#include <torch/torch.h>

namespace cornstarch {

Batch Batch::To(const c10::Device& device) const {
  const auto move = [&](const torch::Tensor& t) { return t.defined() ? t.to(device) : t; };
  Batch out;
  out.input_ids = move(input_ids);
  out.labels = move(labels);
  out.positions = move(positions);
  out.mask_words = move(mask_words);
  for (const ModalityInput& m : modalities) out.modalities.push_back({move(m.inputs), move(m.positions), move(m.rows)});
  out.cp = cp;
  return out;
}

Batch ShardBatch(const Batch& full, const CpLayout& layout, int rank) {
  Batch local;
  local.input_ids = LocalRows(full.input_ids, layout, rank, 1);
  local.labels = LocalRows(full.labels, layout, rank, 1);
  local.positions = LocalRows(full.positions, layout, rank, 1);
  local.mask_words = full.mask_words;
  local.cp = layout;
  // Flat position b * S + t of the whole sequence -> b * S/cp + i on this rank, or -1 if another rank holds it.
  const int64_t b = full.batch_size(), s = full.seq_len(), held = local.seq_len();
  const torch::Tensor mine = layout.tokens[rank] + torch::arange(b).unsqueeze(1) * s;  // [B, S/cp] flat
  torch::Tensor to_local = torch::full({b * s}, -1, torch::kLong);
  to_local.index_put_({mine.reshape({-1})}, torch::arange(b * held));
  for (const ModalityInput& m : full.modalities) {
    ModalityInput part;
    part.inputs = m.inputs;
    const torch::Tensor where = to_local.index_select(0, m.positions);
    part.rows = where.ge(0).nonzero().reshape({-1});
    part.positions = where.index_select(0, part.rows);
    local.modalities.push_back(std::move(part));
  }
  return local;
}

}  // namespace cornstarch
