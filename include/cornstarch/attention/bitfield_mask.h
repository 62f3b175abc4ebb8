// Bitfield attention mask: one 64-bit word per token instead of an N x N mask.
//
// Bit layout (as in the reference system):
//   bit 0      text token
//   bits 1..61 modality bits: modality k (0-based encoder index) owns bit k + 1
//   bit 62     causal flag (carried by text tokens)
//   bit 63     unused (words stay non-negative int64)
// A text token carries bit 0 | bit 62 | every modality bit; a token of modality k carries only bit k + 1; a padding
// token is 0. Token i may attend to token j iff
//   text(i) && j <= i && (w_i & w_j & kAttendMask) != 0        text: causal over text and earlier modality tokens
//   || !text(i) && !text(j) && mbits(i) != 0 && mbits(i) == mbits(j)
//                                                              modality: bidirectional within its modality
// so padding attends to nothing and nothing attends to padding. The reference system omits !text(j); with a single
// modality, a text word's modality bits then equal the modality's bit and image tokens would see (future) text.
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
constexpr int64_t kAttendMask = kCausalBit - 1;                // bits 0..61
constexpr int64_t kModalityMask = kAttendMask & ~kTextBit;     // bits 1..61
constexpr int kMaxModalities = 61;

// Token kinds for the builder: kPadToken, kTextToken, or a modality index >= 0.
constexpr int kTextToken = -1;
constexpr int kPadToken = -2;

CS_HOST_DEVICE inline int64_t ModalityBit(int modality) { return int64_t{1} << (modality + 1); }

// A run of `length` tokens of one kind. Each modality span is one instance (one image, one audio clip).
struct MaskSpan {
  int kind = kTextToken;
  int64_t length = 0;
};

// The word of each token of one sequence, span after span. Without isolation, modality k owns bit k + 1 and text
// words carry the bits of all `num_modalities` modalities: instances of one modality see each other. With
// `isolate_instances`, the i-th modality span of the sequence owns bit i + 1 instead (at most kMaxModalities spans),
// so two images never see each other; text still sees every instance before it. Throws Error for more spans than
// bits or a modality index outside [0, num_modalities).
std::vector<int64_t> BuildMaskWords(const std::vector<MaskSpan>& spans, int num_modalities,
                                    bool isolate_instances = false);

// The attention predicate above, for query i and key j of one sequence.
CS_HOST_DEVICE inline bool MaskAllows(int64_t wi, int64_t wj, int64_t i, int64_t j) {
  if (wi & kTextBit) return j <= i && (wi & wj & kAttendMask) != 0;
  const int64_t mi = wi & kModalityMask;
  return (wj & kTextBit) == 0 && mi != 0 && mi == (wj & kModalityMask);
}

}  // namespace cornstarch
