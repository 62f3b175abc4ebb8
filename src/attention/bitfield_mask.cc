#include "cornstarch/attention/bitfield_mask.h"

#include "cornstarch/util/check.h"

namespace cornstarch {

std::vector<int64_t> BuildMaskWords(const std::vector<int>& kinds, int num_modalities) {
  CS_CHECK(num_modalities >= 0 && num_modalities <= kMaxModalities, "num_modalities=", num_modalities);
  int64_t text_word = kTextBit | kCausalBit;
  for (int k = 0; k < num_modalities; ++k) text_word |= ModalityBit(k);
  std::vector<int64_t> words(kinds.size());
  for (size_t t = 0; t < kinds.size(); ++t) {
    const int kind = kinds[t];
    if (kind == kTextToken) {
      words[t] = text_word;
    } else if (kind == kPadToken) {
      words[t] = 0;
    } else {
      CS_CHECK(kind >= 0 && kind < num_modalities, "token ", t, " has modality ", kind);
      words[t] = ModalityBit(kind);
    }
  }
  return words;
}

}  // namespace cornstarch
