// The vision encoder kind: a ViT over square image patches, in SigLIP style (patch convolution with bias, one
// learned position per patch) or CLIP style (a learned class token in front of the patches with a position of its
// own, a bias-free patch convolution, pre_layrnorm after the embeddings; the class token is dropped before the
// projector, as LLaVA does). With dynamic_resolution an image takes as many patches as its size gives
// (plan/image_grid.h); the planning figures here (tokens, FLOPs) are then those of an image_size square, and the
// position table stays that square's, resized per image (or absent under 'rope_2d').
#include "cornstarch/plan/encoder_kind.h"
#include "cornstarch/plan/image_grid.h"

namespace cornstarch {

namespace {

bool Clip(const EncoderConfig& e) { return e.vision_style == VisionStyle::kClip; }

// The position table's patches: an image_size square's.
int64_t Patches(const EncoderConfig& e) { return (e.image_size / e.patch_size) * (e.image_size / e.patch_size); }

// Tokens one image hands on: an image_size square's (at most max_patches under dynamic_resolution; its base view
// and tiles under anyres).
int64_t Tokens(const EncoderConfig& e) {
  return PackedTower(e) ? ImageTokens(e.image_size, e.image_size, e) : Patches(e);
}

bool Rope2d(const EncoderConfig& e) { return PackedTower(e) && e.dynamic_positions == VisionPositions::kRope2d; }

void Validate(const EncoderConfig& e, const std::string& p) {
  RequireConfig(e.patch_size >= 1, p + ".patch_size", "must be at least 1", std::to_string(e.patch_size));
  RequireConfig(e.image_size >= 1, p + ".image_size", "must be at least 1", std::to_string(e.image_size));
  RequireConfig(e.image_size % e.patch_size == 0, p + ".image_size",
                "must be a multiple of patch_size=" + std::to_string(e.patch_size), std::to_string(e.image_size));
  RequireConfig(e.num_channels >= 1, p + ".num_channels", "must be at least 1", std::to_string(e.num_channels));
  RequireConfig(!Clip(e) || !e.post_norm, p + ".post_norm",
                "must be false with vision_style 'clip' (CLIP's post_layernorm normalises only the pooled class "
                "token)",
                "true");
  RequireConfig(e.max_patches >= 0, p + ".max_patches", "must be 0 (an image_size square's) or more",
                std::to_string(e.max_patches));
  RequireConfig(e.anyres_max_tiles >= 0, p + ".anyres_max_tiles", "must be 0 (off) or more",
                std::to_string(e.anyres_max_tiles));
  RequireConfig(!e.dynamic_resolution || e.anyres_max_tiles == 0, p + ".anyres_max_tiles",
                "must be 0 with dynamic_resolution (tiles are image_size squares)", std::to_string(e.anyres_max_tiles));
  RequireConfig(!Clip(e) || e.anyres_max_tiles == 0, p + ".anyres_max_tiles",
                "must be 0 with vision_style 'clip' (a class token per view is not supported)",
                std::to_string(e.anyres_max_tiles));
  if (!PackedTower(e)) return;
  RequireConfig(!Clip(e), p + ".dynamic_resolution",
                "must be false with vision_style 'clip' (a class token per image is not supported)", "true");
  const int64_t head = e.num_heads > 0 ? e.hidden_size / e.num_heads : 0;
  RequireConfig(!Rope2d(e) || head % 4 == 0, p + ".dynamic_positions",
                "must be 'interpolate' when the head size (hidden_size / num_heads = " + std::to_string(head) +
                    ") is not a multiple of 4",
                "'rope_2d'");
}

// A convolution with stride = patch size (no bias in CLIP), plus learned positions; CLIP also has its class token
// and pre_layrnorm.
EmbeddingRecipe Embedding(const EncoderConfig& e) {
  EmbeddingRecipe r;
  r.convs = {{"patch", 2, e.num_channels, e.hidden_size, e.patch_size, e.patch_size, 0, !Clip(e), false}};
  r.class_token = r.pre_norm = Clip(e);
  r.positions = Rope2d(e) ? EmbeddingRecipe::Positions::kNone : EmbeddingRecipe::Positions::kLearned;
  return r;
}

HfEncoderNames Names(const EncoderConfig& e) {
  HfEncoderNames n{"vision_model.", "vision_model.encoder.layers.", "layer_norm1", "layer_norm2", "mlp.fc1",
                   "mlp.fc2",       true,                           "vision_model.post_layernorm", {}, "", ""};
  const std::string p = "vision_model.embeddings.";
  if (Clip(e)) {
    n.embedding = {{"patch.weight", p + "patch_embedding.weight"},
                   {"class_token", p + "class_embedding"},
                   {"pre_norm.weight", "vision_model.pre_layrnorm.weight"},
                   {"pre_norm.bias", "vision_model.pre_layrnorm.bias"}};
  } else {
    n.embedding = {{"patch.weight", p + "patch_embedding.weight"}, {"patch.bias", p + "patch_embedding.bias"}};
  }
  if (Rope2d(e)) {
    n.unused.push_back(p + "position_embedding.weight");
  } else {
    n.embedding.push_back({"position", p + "position_embedding.weight"});
  }
  return n;
}

}  // namespace

extern const EncoderKind kVisionEncoder = {
    EncoderType::kVision,
    InputModality::kImage,
    // In a packed tower an instance is a row of flattened patches (channel, then pixel row and column).
    [](const EncoderConfig& e) {
      return PackedTower(e) ? std::vector<int64_t>{Tokens(e), e.num_channels * e.patch_size * e.patch_size}
                                  : std::vector<int64_t>{e.num_channels, e.image_size, e.image_size};
    },
    Tokens,
    [](const EncoderConfig& e) { return Tokens(e) + (Clip(e) ? 1 : 0); },
    Embedding,
    // The patch convolution: one [C x P x P] -> [hidden] product per patch.
    [](const EncoderConfig& e) {
      return 2.0 * static_cast<double>(Tokens(e)) * static_cast<double>(e.num_channels * e.patch_size * e.patch_size) *
             static_cast<double>(e.hidden_size);
    },
    // Convolution weight and bias (CLIP: no bias, but the class token and pre_layrnorm's gain and bias), and a
    // position per token of an image_size square (none under rope_2d).
    [](const EncoderConfig& e) {
      const double d = static_cast<double>(e.hidden_size);
      return static_cast<double>(e.num_channels * e.patch_size * e.patch_size) * d + (Clip(e) ? 3 * d : d) +
             (Rope2d(e) ? 0.0 : static_cast<double>(Patches(e) + (Clip(e) ? 1 : 0)) * d);
    },
    Validate,
    Names,
};

}  // namespace cornstarch
