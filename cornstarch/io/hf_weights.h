// Hugging Face weights in and out. One name map per architecture, from this model's parameters to the tensors
// of a Hugging Face checkpoint (names after the module's weights_prefix):
//   LLM (Llama, Qwen2)   model.embed_tokens, model.layers.{i}.{input_layernorm, self_attn.{q,k,v,o}_proj,
//                        post_attention_layernorm, mlp.{gate,up,down}_proj}, model.norm, lm_head (or the tied
//                        embedding when a checkpoint has no lm_head)
//   vision (SigLIP)      vision_model.embeddings.{patch_embedding, position_embedding},
//                        vision_model.encoder.layers.{i}.{layer_norm1, self_attn.{q,k,v,out}_proj, layer_norm2,
//                        mlp.fc1, mlp.fc2}, vision_model.post_layernorm
//   vision (CLIP)        as SigLIP, plus vision_model.embeddings.class_embedding and vision_model.pre_layrnorm;
//                        patch_embedding has no bias, post_layernorm is not used (it is for the pooled token)
//   audio (Whisper)      model.encoder.{conv1, conv2}, model.encoder.layers.{i}.{self_attn_layer_norm,
//                        self_attn.{q,k,v,out}_proj (k_proj has no bias), final_layer_norm, fc1, fc2},
//                        model.encoder.layer_norm; model.encoder.embed_positions must equal our sinusoids
// q/k/v of the encoders are fused here (one [3d, d] projection) and split on export. Blocks after feature_layer
// and, without post_norm, the final LayerNorm are known but not loaded. Projectors have no Hugging Face standard;
// they are exported as multi_modal_projector.<encoder>.linear_{1,2}.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "cornstarch/plan/config.h"
#include "cornstarch/plan/model_spec.h"

namespace cornstarch {

class DistRuntime;
class MultimodalModel;

// One of our parameters as Hugging Face tensors: concatenated along dim 0, a part with zero_rows > 0 being that
// many rows of zeros (Whisper's missing k_proj bias).
struct HfPart {
  std::string name;
  int64_t zero_rows = 0;
};
struct HfTensor {
  std::string ours;      // "encoder.vision.block.0.qkv.weight"
  std::vector<HfPart> parts;
  std::string fallback;  // used when parts[0] is absent (tied embeddings); empty: none
};

// The map of every parameter of layer `layer` (names without the module's prefix). Pure.
std::vector<HfTensor> HfTensorsOf(const ModelConfig& config, const ModelSpec& spec, int layer);

// Loads chain `chain`'s weights (its config's `weights`, `weights_prefix`) into the layers `model` built: a
// .safetensors file, or a directory holding model.safetensors or model.safetensors.index.json. Throws Error
// naming the file: missing tensors, unexpected ones (under the architecture's names), shape mismatches. A
// tensor-parallel model takes its slice of each split tensor.
void LoadHfWeights(MultimodalModel& model, int chain);

// Writes every built layer's parameters under Hugging Face names (prefix-free) to `path` in `dtype`, atomically.
// `whole`: the parameters by our name when the model's own are tensor-parallel slices (the caller gathers them).
void ExportHfWeights(const MultimodalModel& model, const std::string& path,
                     const std::map<std::string, at::Tensor>& whole = {}, at::ScalarType dtype = at::kFloat);

// Writes `dir`/model.safetensors.index.json, the map from tensor name to file that Hugging Face loaders read, from
// the headers of `shards` (file names in `dir`, all written), atomically.
void WriteHfIndex(const std::string& dir, const std::vector<std::string>& shards);

}  // namespace cornstarch
