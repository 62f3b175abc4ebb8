#include "cornstarch/plan/bitfield_mask.h"

#include <string>

#include "cornstarch/base/check.h"

namespace cornstarch {

namespace {

bool IsModality(int kind) { return kind != kTextToken && kind != kPadToken; }

}  // namespace

int MaskGroupsNeeded(const std::vector<MaskSpan>& spans, bool isolate_instances) {
  std::vector<bool> seen;
  int groups = 1;  // the document's own bit
  for (const MaskSpan& span : spans) {
    if (!IsModality(span.kind)) continue;
    if (isolate_instances) {
      ++groups;
      continue;
    }
    if (static_cast<size_t>(span.kind) >= seen.size()) seen.resize(span.kind + 1, false);
    if (!seen[span.kind]) ++groups;
    seen[span.kind] = true;
  }
  return groups;
}

std::vector<int64_t> BuildPackedMaskWords(const std::vector<std::vector<MaskSpan>>& documents, int num_modalities,
                                          bool isolate_instances) {
  CS_CHECK(num_modalities >= 0, "num_modalities=", num_modalities);
  std::vector<int64_t> words;
  int next_group = 0;
  const auto take_bit = [&]() {
    if (next_group == kMaxGroups) {
      throw Error("attention mask: more than " + std::to_string(kMaxGroups) +
                  " attention groups (documents and their modality groups) in one sequence");
    }
    return int64_t{1} << (1 + next_group++);
  };
  for (size_t d = 0; d < documents.size(); ++d) {
    const std::vector<MaskSpan>& spans = documents[d];
    // First pass: the bit of every modality span, and so the bits this document's text carries.
    int64_t text_word = kTextBit | kCausalBit | take_bit();
    std::vector<int64_t> kind_bits(num_modalities, 0);
    std::vector<int64_t> span_bits(spans.size(), 0);
    for (size_t s = 0; s < spans.size(); ++s) {
      const int kind = spans[s].kind;
      if (!IsModality(kind)) continue;
      if (kind < 0 || kind >= num_modalities) {
        throw Error("attention mask: span " + std::to_string(s) + (documents.size() > 1 ? " of document " +
                    std::to_string(d) : std::string()) + " has modality " + std::to_string(kind) + ", expected 0.." +
                    std::to_string(num_modalities - 1));
      }
      if (isolate_instances) {
        span_bits[s] = take_bit();
      } else {
        if (kind_bits[kind] == 0) kind_bits[kind] = take_bit();
        span_bits[s] = kind_bits[kind];
      }
      text_word |= span_bits[s];
    }
    for (size_t s = 0; s < spans.size(); ++s) {
      const int kind = spans[s].kind;
      const int64_t word = kind == kTextToken ? text_word : kind == kPadToken ? 0 : span_bits[s];
      words.insert(words.end(), spans[s].length, word);
    }
  }
  return words;
}

std::vector<int64_t> BuildMaskWords(const std::vector<MaskSpan>& spans, int num_modalities, bool isolate_instances) {
  return BuildPackedMaskWords({spans}, num_modalities, isolate_instances);
}

}  // namespace cornstarch
