// A layer is the unit the pipeline places on a stage: one step of a chain (encoder or LLM) mapping the chain's
// hidden state to the next. Chain inputs come from the context: the first encoder layer gets the raw modality
// input as `x`, the LLM's embed layer reads token ids and the encoders' projected features.
#pragma once

#include <torch/nn/module.h>

#include <string>
#include <vector>

#include "cornstarch/data/batch.h"
#include "cornstarch/model/tensor_parallel.h"

namespace cornstarch {

class Communicator;

// What a layer may read besides its input: the microbatch (its mask words drive the LLM attention) and the
// per-microbatch RoPE tables, computed once.
struct ForwardContext {
  const Batch* batch = nullptr;
  torch::Tensor rope_cos, rope_sin;    // [B, S, head_dim]: RoPE tables of batch->positions
  std::vector<torch::Tensor> features;  // projected features per encoder, [n, tokens, llm_hidden]
  // Per encoder: its blocks' 2-D RoPE tables [R, T, head_dim] (dynamic_positions 'rope_2d'); undefined: none.
  std::vector<std::pair<torch::Tensor, torch::Tensor>> encoder_rope;
  Communicator* cp_group = nullptr;      // the cp group, when batch->cp.cp > 1
  Communicator* tp_group = nullptr;      // the tp group (model/tensor_parallel.h); null or of size 1: none
};

class Layer : public torch::nn::Module {
 public:
  virtual torch::Tensor Forward(const torch::Tensor& x, ForwardContext& ctx) = 0;

  // Tensor parallelism: keep only this rank's slice of the initialised weights (the layers that split do so;
  // the rest stay whole), and how parameter `name` (as named_parameters() spells it) is then laid out.
  virtual void ShardTp(const TpShard&) {}
  virtual TpSplit SplitOf(const std::string& name) const { return TpSplit::kReplicated; }

 protected:
  // Keeps this rank's slice of every parameter, cut as SplitOf says (what ShardTp overrides start with).
  void KeepSlices(const TpShard& shard) {
    torch::NoGradGuard no_grad;
    for (auto& item : named_parameters()) {
      item.value().set_data(TpSlice(item.value(), SplitOf(item.key()), shard).clone());
    }
  }
};

}  // namespace cornstarch
