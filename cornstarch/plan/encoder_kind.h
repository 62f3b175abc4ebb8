// Encoder kinds. Everything that differs between kinds of modality encoder (a ViT over image patches, a Whisper
// encoder over mel frames, ...) is reached through the kind's one entry here: input shape, token counts, its
// embedding layer (as a recipe the model layer builds: model/chain_ends.h's EncoderEmbed), that layer's FLOPs and
// parameters, the checks of its config fields, the input modality the data layer decodes for it, and its tensor
// names in Hugging Face checkpoints. The blocks, final norm and projector after the embedding are the same for
// every kind. Pure.
//
// A new kind: its EncoderType value and YAML name (plan/config.h), one file defining its entry (like
// vision_encoder.cc), and one line in KindOf (encoder_kind.cc).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "cornstarch/plan/config.h"

namespace cornstarch {

// What the data layer decodes for an encoder: image files (CLIP/SigLIP preprocessing) or audio files (log-mel).
enum class InputModality { kImage, kAudio };

// A kind's tower in a Hugging Face checkpoint: the tensor names relative to the encoder's weights_prefix.
struct HfEncoderNames {
  std::string root;          // every tensor of the tower starts with it ("vision_model.")
  std::string blocks;        // block i is blocks + i + "." ("vision_model.encoder.layers.")
  std::string norm1, norm2;  // a block's pre-attention and pre-MLP LayerNorms ("layer_norm1", "layer_norm2")
  std::string fc1, fc2;      // a block's MLP ("mlp.fc1", "mlp.fc2")
  bool k_bias = true;        // false: the checkpoint has no k_proj bias (Whisper); ours is loaded as zeros
  std::string final_norm;    // the tower's last LayerNorm ("vision_model.post_layernorm")
  // The embedding layer's parameters: (our name within the layer, the checkpoint's tensor), one to one.
  std::vector<std::pair<std::string, std::string>> embedding;
  // A checkpoint tensor equal to a fixed (never trained) position table of ours, compared on load instead of
  // loaded, and what the table is (for errors); empty: none.
  std::string fixed_positions, fixed_positions_are;
  // Checkpoint tensors this configuration has no use for (a learned position table under rope_2d): known, not
  // loaded.
  std::vector<std::string> unused;
};

// The embedding layer: input convolutions (each optionally followed by GELU), the output's positions flattened
// into a sequence of hidden_size tokens, a learned class token in front (optional), positions added, a LayerNorm
// (optional). Names are the layer's parameter names, which checkpoints and the Hugging Face map use.
struct EmbeddingRecipe {
  struct Conv {
    std::string name;  // "patch", "conv1"
    int dims = 1;      // 1: over [n, C, L]; 2: over [n, C, H, W]
    int64_t in = 0, out = 0, kernel = 1, stride = 1, padding = 0;
    bool bias = true;
    bool gelu = false;  // exact GELU after it
  };
  enum class Positions {
    kLearned,     // "position": a parameter, one row per token of the tower
    kSinusoidal,  // "position": a fixed buffer, Whisper's sinusoids (sin over the first half of the channels)
    kNone,        // none here: rotary positions in the blocks (dynamic_positions 'rope_2d')
  };
  std::vector<Conv> convs;
  bool class_token = false;  // "class_token"
  Positions positions = Positions::kLearned;
  bool pre_norm = false;     // "pre_norm", with layer_norm_eps
};

struct EncoderKind {
  EncoderType type;
  InputModality modality;
  // One instance's input, without the batch dimension: [C, H, W] for images ([patches, C * P * P] in a packed
  // tower: dynamic_resolution or anyres), [mel bins, frames] for audio.
  std::vector<int64_t> (*input_shape)(const EncoderConfig&);
  // Tokens one instance hands the projector (and takes in the LLM sequence).
  int64_t (*tokens)(const EncoderConfig&);
  // Tokens the blocks attend over: `tokens` plus any the tower drops before its projector (CLIP's class token).
  int64_t (*sequence)(const EncoderConfig&);
  EmbeddingRecipe (*embedding)(const EncoderConfig&);
  // Forward FLOPs and parameter count of the embedding layer, per instance.
  double (*embedding_flops)(const EncoderConfig&);
  double (*embedding_parameters)(const EncoderConfig&);
  // Throws Error("<path>.<field>: ...") for a field of this kind out of range; `path` is "model.encoders.<name>".
  void (*validate)(const EncoderConfig&, const std::string& path);
  HfEncoderNames (*hf_names)(const EncoderConfig&);
};

// The entry of `type`.
const EncoderKind& KindOf(EncoderType type);

// Shorthands for KindOf(encoder.type).tokens / .sequence.
int64_t EncoderTokens(const EncoderConfig& encoder);
int64_t EncoderSequence(const EncoderConfig& encoder);

}  // namespace cornstarch
