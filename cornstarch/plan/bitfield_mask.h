// Bitfield attention mask: one 64-bit word per token instead of an N x N mask.
//
// Bit layout:
//   bit 0      text token
//   bits 1..61 group bits: each document of a sequence and each of its modality groups owns one
//   bit 62     causal flag (carried by text tokens)
//   bit 63     unused (words stay non-negative int64)
// A modality group is one modality of a document (or, with instance isolation, one image or audio clip). A token of
// a group carries only that group's bit; a text token carries bit 0 | bit 62 | its document's bit | the bits of
// every group of its document; a padding token is 0. Token i may attend to token j iff
//   text(i) && j <= i && (w_i & w_j & kGroupMask) != 0       text: causal over its document's text and media
//   || !text(i) && !text(j) && g(i) != 0 && g(i) == g(j)     modality: bidirectional within its group
// so padding attends to nothing, nothing attends to padding, and documents packed into one sequence never see each
// other. Unlike the reference system, bit 0 is only a flag: the document bit is what text shares, which is what
// lets packing isolate documents. The reference also omits !text(j); with a single modality, a text word's bits
// then equal the modality's and image tokens would see (future) text.
#pragma once

#include <cstdint>
#include <vector>

// The predicate is shared with the CUDA kernels (kernels/), which compile this header with nvcc.
#ifdef __CUDACC__
#define CS_HOST_DEVICE __host__ __device__
#else
#define CS_HOST_DEVICE
#endif

namespace cornstarch {

constexpr int64_t kTextBit = int64_t{1} << 0;
constexpr int64_t kCausalBit = int64_t{1} << 62;
constexpr int64_t kGroupMask = (kCausalBit - 1) & ~kTextBit;  // bits 1..61
constexpr int kMaxGroups = 61;

// Token kinds for the builder: kPadToken, kTextToken, or a modality index >= 0.
constexpr int kTextToken = -1;
constexpr int kPadToken = -2;

// A run of `length` tokens of one kind. Each modality span is one instance (one image, one audio clip).
struct MaskSpan {
  int kind = kTextToken;
  int64_t length = 0;
};

// The words of one sequence holding `documents` one after another, each a run of spans. Without isolation each
// modality present in a document is one group (its images see each other); with `isolate_instances` every modality
// span is its own group. Throws Error when the groups need more than kMaxGroups bits or a span's modality is outside
// [0, num_modalities).
std::vector<int64_t> BuildPackedMaskWords(const std::vector<std::vector<MaskSpan>>& documents, int num_modalities,
                                          bool isolate_instances = false);

// One document: BuildPackedMaskWords({spans}, ...).
std::vector<int64_t> BuildMaskWords(const std::vector<MaskSpan>& spans, int num_modalities,
                                    bool isolate_instances = false);

// The group bits a document takes: its own plus one per modality (or per modality span when isolated). Packing
// stops adding documents to a sequence at kMaxGroups.
int MaskGroupsNeeded(const std::vector<MaskSpan>& spans, bool isolate_instances);

// The attention predicate above, for query i and key j of one sequence.
CS_HOST_DEVICE inline bool MaskAllows(int64_t wi, int64_t wj, int64_t i, int64_t j) {
  if (wi & kTextBit) return j <= i && (wi & wj & kGroupMask) != 0;
  const int64_t gi = wi & kGroupMask;
  return (wj & kTextBit) == 0 && gi != 0 && gi == (wj & kGroupMask);
}

}  // namespace cornstarch
