// What the 1F1B golden file (tests/pipeline/testdata/1f1b_golden.txt) records of a schedule, shared by its
// generator and its test so that both hash the same bytes: the key of a case and the digest of its text (one line
// per stage, "stage <s>:" then " <action>" for each action: the bytes the generator of the committed file printed,
// kept since FormatSchedule labels its lines by rank; without interleaving rank and stage are the same number).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "cornstarch/plan/schedule.h"

namespace cornstarch::testing {

// 64-bit FNV-1a of `bytes`, as 16 lowercase hex digits.
inline std::string Fnv1a64(const std::string& bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) h = (h ^ c) * 0x100000001b3ull;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

// The text the digests are of: FormatSchedule's, each line labelled "stage" rather than "rank".
inline std::string GoldenText(const Schedule& schedule) {
  std::string text = FormatSchedule(schedule);
  for (size_t line = 0; line < text.size(); line = text.find('\n', line) + 1) text.replace(line, 4, "stage");
  return text;
}

// "enc=1,2 llm=3 backward=011111 m=4": stages per encoder chain ("-" for none), LLM stages, 0/1 per stage.
inline std::string GoldenKey(const std::vector<int>& encoder_stages, int llm_stages,
                             const std::vector<bool>& has_backward, int microbatches) {
  std::string enc;
  for (int n : encoder_stages) enc += (enc.empty() ? "" : ",") + std::to_string(n);
  std::string backward;
  for (bool b : has_backward) backward += b ? '1' : '0';
  return "enc=" + (enc.empty() ? "-" : enc) + " llm=" + std::to_string(llm_stages) + " backward=" + backward +
         " m=" + std::to_string(microbatches);
}

}  // namespace cornstarch::testing
