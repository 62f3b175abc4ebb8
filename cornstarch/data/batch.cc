#include "cornstarch/data/batch.h"

#include <torch/torch.h>

#include "cornstarch/base/check.h"

namespace cornstarch {

Batch Batch::To(const c10::Device& device) const {
  const auto move = [&](const torch::Tensor& t) { return t.defined() ? t.to(device) : t; };
  Batch out;
  out.input_ids = move(input_ids);
  out.labels = move(labels);
  out.positions = move(positions);
  out.mask_words = move(mask_words);
  for (const ModalityInput& m : modalities) {
    out.modalities.push_back(
        {move(m.inputs), move(m.positions), move(m.rows), move(m.grid), move(m.patches), move(m.words)});
  }
  out.cp = cp;
  return out;
}

ModalityInput PackPatches(const torch::Tensor& patches, const std::vector<PatchGrid>& grids) {
  const PackedImages packed = PackImages(grids);
  const int64_t width = patches.size(1);
  std::vector<int64_t> grid, at;
  for (size_t i = 0; i < grids.size(); ++i) {
    grid.insert(grid.end(), {grids[i].rows, grids[i].cols});
    for (int64_t k = 0; k < grids[i].patches(); ++k) at.push_back(packed.start[i] + k);
  }
  ModalityInput m;
  m.patches = torch::tensor(at, torch::kLong);
  CS_CHECK(patches.size(0) == m.patches.numel(), patches.size(0), " patches for grids of ", m.patches.numel());
  m.inputs = torch::zeros({packed.rows * packed.length, width}, torch::kFloat)
                 .index_copy_(0, m.patches, patches)
                 .view({packed.rows, packed.length, width});
  m.grid = torch::tensor(grid, torch::kLong).view({-1, 2});
  m.words = torch::tensor(packed.words, torch::kLong).view({packed.rows, packed.length});
  return m;
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
    ModalityInput part = m;
    const torch::Tensor where = to_local.index_select(0, m.positions);
    part.rows = where.ge(0).nonzero().reshape({-1});
    part.positions = where.index_select(0, part.rows);
    local.modalities.push_back(std::move(part));
  }
  return local;
}

}  // namespace cornstarch
