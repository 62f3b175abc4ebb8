// Token layouts of typical MLLM samples, shared by the benchmarks: the spans of one sequence of n tokens.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "cornstarch/plan/bitfield_mask.h"

namespace cornstarch::bench {

inline const std::vector<std::string>& MllmLayoutNames() {
  static const std::vector<std::string> names = {"image+text", "image+audio+text", "interleaved"};
  return names;
}

//   image+text        a short prompt, one 576-token image (LLaVA-1.5 at 336 px), then text
//   image+audio+text  the same plus a 1500-token audio clip (Whisper, 30 s)
//   interleaved       one 576-token image every 1024 tokens, each followed by text
inline std::vector<MaskSpan> MllmLayout(const std::string& name, int64_t n) {
  std::vector<MaskSpan> spans;
  int64_t used = 0;
  auto add = [&](int kind, int64_t len) {
    len = std::min(len, n - used);
    if (len > 0) spans.push_back({kind, len}), used += len;
  };
  if (name == "interleaved") {
    while (used + 1024 <= n) add(0, 576), add(kTextToken, 448);
  } else {
    add(kTextToken, 32);
    add(0, 576);
    if (name == "image+audio+text") add(1, 1500);
  }
  add(kTextToken, n - used);
  return spans;
}

}  // namespace cornstarch::bench
