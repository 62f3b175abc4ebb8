// Where each rank of a context-parallel group holds a microbatch's tokens: the CP balancer's block assignment
// (plan/cp_balancer.h) turned into token indices, and the row selection that shards a whole-sequence tensor. Batches
// carry a layout; the attention that gathers keys back (model/cp_attention.h) reads it.
#pragma once

#include <torch/types.h>

#include "cornstarch/plan/cp_balancer.h"

namespace cornstarch {

// Where a microbatch's tokens live: identical on every rank of the cp group (a function of the mask words).
struct CpLayout {
  int cp = 1;
  int64_t block = 128;
  CpSplit split = CpSplit::kBalanced;
  torch::Tensor tokens;  // [cp, B, S / cp] int64: the original positions rank r holds, ascending per sample
};

// Splits each sample of `words` [B, S] into blocks of `block` tokens and assigns them with `split`.
// REQUIRES: S divisible by cp * block. Blocks that are whole 64-row kernel tiles avoid recomputation: a tile
// shared by two ranks is computed by both (correct, since each keeps only its rows' results, but twice).
CpLayout PlanCpLayout(const torch::Tensor& words, int cp, int64_t block, CpSplit split);

// Rows `layout.tokens[rank]` of x [B, ..., S, ...] along `dim`: this rank's share of a full-sequence tensor.
torch::Tensor LocalRows(const torch::Tensor& x, const CpLayout& layout, int rank, int64_t dim);

}  // namespace cornstarch
