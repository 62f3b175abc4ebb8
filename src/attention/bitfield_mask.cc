#include "cornstarch/attention/bitfield_mask.h"

#include <string>

#include "cornstarch/util/check.h"

namespace cornstarch {

std::vector<int64_t> BuildMaskWords(const std::vector<MaskSpan>& spans, int num_modalities, bool isolate_instances) {
  CS_CHECK(num_modalities >= 0 && num_modalities <= kMaxModalities, "num_modalities=", num_modalities);
  // First pass: the bit of every modality span, and so the bits text tokens carry.
  std::vector<int64_t> span_bits(spans.size(), 0);
  int64_t text_word = kTextBit | kCausalBit;
  int instances = 0;
  for (size_t s = 0; s < spans.size(); ++s) {
    const int kind = spans[s].kind;
    if (kind == kTextToken || kind == kPadToken) continue;
    if (kind < 0 || kind >= num_modalities) {
      throw Error("attention mask: span " + std::to_string(s) + " has modality " + std::to_string(kind) +
                  ", expected 0.." + std::to_string(num_modalities - 1));
    }
    if (isolate_instances && instances == kMaxModalities) {
      throw Error("attention mask: more than " + std::to_string(kMaxModalities) +
                  " isolated modality instances in one sequence");
    }
    span_bits[s] = ModalityBit(isolate_instances ? instances++ : kind);
  }
  if (isolate_instances) {
    for (int64_t bits : span_bits) text_word |= bits;
  } else {
    for (int k = 0; k < num_modalities; ++k) text_word |= ModalityBit(k);
  }
  std::vector<int64_t> words;
  for (size_t s = 0; s < spans.size(); ++s) {
    const int kind = spans[s].kind;
    const int64_t word = kind == kTextToken ? text_word : kind == kPadToken ? 0 : span_bits[s];
    words.insert(words.end(), spans[s].length, word);
  }
  return words;
}

}  // namespace cornstarch
