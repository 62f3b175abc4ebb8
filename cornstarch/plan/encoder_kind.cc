#include "cornstarch/plan/encoder_kind.h"

#include "cornstarch/base/check.h"

namespace cornstarch {

// One entry per kind, each defined in its own file.
extern const EncoderKind kVisionEncoder;
extern const EncoderKind kAudioEncoder;

const EncoderKind& KindOf(EncoderType type) {
  switch (type) {
    case EncoderType::kVision: return kVisionEncoder;
    case EncoderType::kAudio: return kAudioEncoder;
  }
  CS_CHECK(false, "no encoder kind registered for type ", static_cast<int>(type));
  return kVisionEncoder;
}

int64_t EncoderTokens(const EncoderConfig& encoder) { return KindOf(encoder.type).tokens(encoder); }

int64_t EncoderSequence(const EncoderConfig& encoder) { return KindOf(encoder.type).sequence(encoder); }

}  // namespace cornstarch
