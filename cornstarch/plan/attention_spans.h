// The bitfield mask as the spans a variable-length fused attention runs: the fast exact path on GPUs (LibTorch's
// flash attention with cumulative sequence lengths) and its CPU reference both take these. With the mask layout
// of plan/bitfield_mask.h every allowed pair lies in a simple span:
//   - a text row attends causally to every token of its document up to itself (its text and its media), so the
//     documents are the segments of one causal pass;
//   - a modality row attends bidirectionally to exactly the tokens carrying its group, so the groups (gathered
//     when an unisolated modality's images lie apart) are the segments of one bidirectional pass;
//   - padding (and any row whose words allow nothing) attends to nothing: its output is zero.
// Each row's output comes from the one pass that owns it, so the combination's backward counts no gradient twice.
// Words of another form (a hand-made mask) are reported, and the caller runs the general kernel. Pure.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace cornstarch {

// One pass over segments of tokens gathered from a [batch, seq] layout.
struct VarlenPass {
  std::vector<int64_t> rows;        // flat token indices (sample * seq + position), segment after segment
  std::vector<int64_t> cu_seqlens;  // segment boundaries in `rows`: 0, then the running total after each segment
  std::vector<int64_t> owned;       // indices into `rows` whose outputs this pass provides, ascending
  int64_t max_seqlen = 0;
  int64_t segments() const { return static_cast<int64_t>(cu_seqlens.size()) - 1; }
};

struct AttentionSpans {
  VarlenPass causal;         // documents: rows [begin, end) of one sample; owned: their text rows
  VarlenPass bidirectional;  // modality groups; every row owned
};

// The spans of `words` ([batch][seq], row-major), or nullopt when a text row's allowed keys are not the contiguous
// run of its document ending at the row, or two documents' runs overlap. Rows owned by neither pass are exactly
// those whose words allow nothing. Runs in O(batch x seq x documents per sample).
std::optional<AttentionSpans> DecomposeMask(const int64_t* words, int64_t batch, int64_t seq);

}  // namespace cornstarch
