// The audio encoder kind: a Whisper encoder over log-mel frames. Its stem is two 1-D convolutions (kernel 3; the
// second with stride 2, so one token per two frames), each followed by GELU, plus fixed sinusoidal positions.
#include "cornstarch/plan/encoder_kind.h"

namespace cornstarch {

namespace {

int64_t Frames(const EncoderConfig& e) { return e.num_frames / 2; }

void Validate(const EncoderConfig& e, const std::string& p) {
  RequireConfig(e.num_mel_bins >= 1, p + ".num_mel_bins", "must be at least 1", std::to_string(e.num_mel_bins));
  RequireConfig(e.num_frames >= 2 && e.num_frames % 2 == 0, p + ".num_frames",
                "must be even and at least 2 (the second conv has stride 2)", std::to_string(e.num_frames));
  RequireConfig(!e.dynamic_resolution, p + ".dynamic_resolution", "must be false for an audio encoder", "true");
  RequireConfig(e.anyres_max_tiles == 0, p + ".anyres_max_tiles", "must be 0 for an audio encoder",
                std::to_string(e.anyres_max_tiles));
}

EmbeddingRecipe Embedding(const EncoderConfig& e) {
  EmbeddingRecipe r;
  r.convs = {{"conv1", 1, e.num_mel_bins, e.hidden_size, 3, 1, 1, true, true},
             {"conv2", 1, e.hidden_size, e.hidden_size, 3, 2, 1, true, true}};
  r.positions = EmbeddingRecipe::Positions::kSinusoidal;
  return r;
}

HfEncoderNames Names(const EncoderConfig&) {
  return {"model.encoder.",
          "model.encoder.layers.",
          "self_attn_layer_norm",
          "final_layer_norm",
          "fc1",
          "fc2",
          false,
          "model.encoder.layer_norm",
          {{"conv1.weight", "model.encoder.conv1.weight"},
           {"conv1.bias", "model.encoder.conv1.bias"},
           {"conv2.weight", "model.encoder.conv2.weight"},
           {"conv2.bias", "model.encoder.conv2.bias"}},
          "model.encoder.embed_positions.weight",
          "Whisper's sinusoidal positions"};
}

}  // namespace

extern const EncoderKind kAudioEncoder = {
    EncoderType::kAudio,
    InputModality::kAudio,
    [](const EncoderConfig& e) { return std::vector<int64_t>{e.num_mel_bins, e.num_frames}; },
    Frames,
    Frames,
    Embedding,
    // conv1 at every frame ([mel x 3] -> [hidden]), conv2 at every other ([hidden x 3] -> [hidden]).
    [](const EncoderConfig& e) {
      const double d = static_cast<double>(e.hidden_size);
      return 2 * static_cast<double>(e.num_frames) * static_cast<double>(e.num_mel_bins * 3) * d +
             2 * static_cast<double>(Frames(e)) * 3 * d * d;
    },
    [](const EncoderConfig& e) {
      const double d = static_cast<double>(e.hidden_size);
      return static_cast<double>(e.num_mel_bins) * d * 3 + d + 3 * d * d + d;
    },
    Validate,
    Names,
};

}  // namespace cornstarch
