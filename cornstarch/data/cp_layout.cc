#include "cornstarch/data/cp_layout.h"

#include <torch/torch.h>

#include "cornstarch/base/check.h"

namespace cornstarch {

CpLayout PlanCpLayout(const torch::Tensor& words_in, int cp, int64_t block, CpSplit split) {
  const torch::Tensor words = words_in.contiguous();
  const int64_t B = words.size(0), n = words.size(1);
  CS_CHECK(n % (cp * block) == 0, "sequence of ", n, " tokens does not split into ", cp, " x ", block);
  CpLayout layout;
  layout.cp = cp;
  layout.block = block;
  layout.split = split;
  const int64_t local = n / cp;
  layout.tokens = torch::empty({cp, B, local}, torch::kLong);
  for (int64_t b = 0; b < B; ++b) {
    const CpAssignment a = AssignBlocks(BlockWork(words[b].data_ptr<int64_t>(), n, block), cp, split);
    for (int r = 0; r < cp; ++r) {
      int64_t* out = layout.tokens[r][b].data_ptr<int64_t>();
      for (int64_t blk : a.blocks[r]) {
        for (int64_t i = 0; i < block; ++i) *out++ = blk * block + i;
      }
    }
  }
  return layout;
}

torch::Tensor LocalRows(const torch::Tensor& x, const CpLayout& layout, int rank, int64_t dim) {
  const torch::Tensor idx = layout.tokens[rank];  // [B, L]
  std::vector<int64_t> view(static_cast<size_t>(x.dim()), 1);
  view[0] = idx.size(0);
  view[static_cast<size_t>(dim)] = idx.size(1);
  std::vector<int64_t> shape = x.sizes().vec();
  shape[static_cast<size_t>(dim)] = idx.size(1);
  return x.gather(dim, idx.view(view).expand(shape));
}

}  // namespace cornstarch
