#include "cornstarch/plan/attention_spans.h"

#include <algorithm>
#include <map>

#include "cornstarch/plan/bitfield_mask.h"

namespace cornstarch {

namespace {

// A document: the group bits its text rows carry, the run its text rows attend over, and those rows.
struct Document {
  int64_t bits = 0;
  int64_t begin = -1, end = -1;
  std::vector<int64_t> text_rows;
};

// Past this many distinct text words in one sample the words are hand-made (the layout has at most kMaxGroups
// documents): not worth the quadratic search.
constexpr size_t kMaxDocuments = 64;

void AddSegment(VarlenPass& pass, int64_t first_row, int64_t length) {
  for (int64_t r = 0; r < length; ++r) pass.rows.push_back(first_row + r);
  pass.cu_seqlens.push_back(static_cast<int64_t>(pass.rows.size()));
  pass.max_seqlen = std::max(pass.max_seqlen, length);
}

}  // namespace

std::optional<AttentionSpans> DecomposeMask(const int64_t* words, int64_t batch, int64_t seq) {
  AttentionSpans spans;
  spans.causal.cu_seqlens = {0};
  spans.bidirectional.cu_seqlens = {0};
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t* w = words + b * seq;
    std::vector<Document> docs;
    std::map<int64_t, std::vector<int64_t>> groups;  // group bits -> positions
    for (int64_t i = 0; i < seq; ++i) {
      const int64_t bits = w[i] & kGroupMask;
      if (bits == 0) continue;  // padding, or a row allowed nothing: owned by no pass, output zero
      if ((w[i] & kTextBit) == 0) {
        groups[bits].push_back(i);
        continue;
      }
      auto doc = std::find_if(docs.begin(), docs.end(), [&](const Document& d) { return d.bits == bits; });
      if (doc == docs.end()) {
        if (docs.size() == kMaxDocuments) return std::nullopt;
        docs.push_back({bits});
        doc = docs.end() - 1;
      }
      doc->text_rows.push_back(i);
    }
    // A text row i of a document attends to {j <= i : w_j shares a bit}: that must be the run [begin, i] for its
    // document's first sharing token `begin`, with no token in between left out.
    for (Document& d : docs) {
      int64_t gap = seq;  // the first token after `begin` that shares no bit
      size_t next_text = 0;
      for (int64_t j = 0; j < seq && next_text < d.text_rows.size(); ++j) {
        const bool shares = (w[j] & d.bits) != 0;
        if (shares && d.begin < 0) d.begin = j;
        if (!shares && d.begin >= 0 && gap == seq) gap = j;
        if (j == d.text_rows[next_text]) {
          if (gap < j) return std::nullopt;
          ++next_text;
        }
      }
      d.end = d.text_rows.back() + 1;
    }
    std::sort(docs.begin(), docs.end(), [](const Document& x, const Document& y) { return x.begin < y.begin; });
    for (size_t d = 0; d + 1 < docs.size(); ++d) {
      if (docs[d].end > docs[d + 1].begin) return std::nullopt;
    }
    for (const Document& d : docs) {
      const int64_t base = static_cast<int64_t>(spans.causal.rows.size());
      AddSegment(spans.causal, b * seq + d.begin, d.end - d.begin);
      for (int64_t i : d.text_rows) spans.causal.owned.push_back(base + i - d.begin);
    }
    // Groups in order of their first token.
    std::vector<const std::vector<int64_t>*> ordered;
    for (const auto& [bits, positions] : groups) ordered.push_back(&positions);
    std::sort(ordered.begin(), ordered.end(), [](auto* x, auto* y) { return x->front() < y->front(); });
    for (const std::vector<int64_t>* positions : ordered) {
      for (int64_t p : *positions) {
        spans.bidirectional.owned.push_back(static_cast<int64_t>(spans.bidirectional.rows.size()));
        spans.bidirectional.rows.push_back(b * seq + p);
      }
      spans.bidirectional.cu_seqlens.push_back(static_cast<int64_t>(spans.bidirectional.rows.size()));
      spans.bidirectional.max_seqlen =
          std::max(spans.bidirectional.max_seqlen, static_cast<int64_t>(positions->size()));
    }
  }
  return spans;
}

}  // namespace cornstarch
