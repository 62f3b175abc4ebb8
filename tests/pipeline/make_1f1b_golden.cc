// Prints tests/pipeline/testdata/1f1b_golden.txt: the 1F1B schedule, sends and receives included, of every stage
// graph of 0..3 encoder chains of 1..2 stages and 1..3 LLM stages, under every has_backward pattern whose last
// stage (the loss) trains, for 1, 2, 3, 4 and 7 microbatches; patterns the validator rejects (a stage that
// trains feeding one that does not) are left out; then longer pipelines (up to 10 stages, up to two encoder
// chains of up to 4 stages; everything training, the encoders frozen, or the first stage frozen) for 1, 2, 4, 8 and
// 16 microbatches. One line per case: its key and the FNV-1a digest of its text.
//
// The committed case lines were printed at commit 52d22963da35ee6a49ade2da7a549a7b25977e11 by this enumeration
// with the generator of that time, which placed sends and receives itself (the longer pipelines by the same loops
// compiled against that commit's schedule.cc). Since then generators emit compute only and
// AddSendRecv adds the communication; together they reproduce the file byte for byte (schedule_test checks every
// line), so regenerating changes nothing unless a schedule is meant to change.
// Regenerate (when a schedule is meant to change):
//   bazel run --jobs=1 //tests:make_1f1b_golden > tests/pipeline/testdata/1f1b_golden.txt
#include <algorithm>
#include <cstdio>
#include <initializer_list>
#include <string>
#include <vector>

#include "cornstarch/plan/schedule.h"
#include "cornstarch/base/check.h"
#include "tests/pipeline/schedule_golden.h"

using namespace cornstarch;
using namespace cornstarch::testing;

namespace {

// The schedule the planner runs for `g`, or false when the validator rejects it.
bool Generate(const StageGraph& g, int m, Schedule& out) {
  out = AddSendRecv(g, Generate1F1B(g, m));
  try {
    ValidateSchedule(g, out, m);
  } catch (const Error&) {
    return false;
  }
  return true;
}

}  // namespace

int main() {
  std::printf(
      "# 1F1B golden schedules, printed by tests/pipeline/make_1f1b_golden.cc (see there to regenerate).\n"
      "# One line per valid case: enc=<stages per encoder chain, - for none> llm=<LLM stages>\n"
      "# backward=<has_backward per stage, 0/1> m=<microbatches> fnv1a64=<digest of the schedule's text>.\n"
      "# The text is one line per stage, \"stage <s>:\" then \" <action>\" per action, each line ending in \\n.\n"
      "# Examples:\n");
  struct Example {
    std::vector<int> enc;
    int llm;
    std::vector<bool> backward;
    int m;
  };
  const std::vector<Example> examples = {{{}, 1, {true}, 2},
                                         {{}, 2, {true, true}, 3},
                                         {{}, 3, {false, true, true}, 2},
                                         {{1}, 2, {true, true, true}, 3},
                                         {{1, 2}, 2, {false, true, true, true, true}, 2}};
  for (const Example& e : examples) {
    Schedule s;
    CS_CHECK(Generate(MakeStageGraph(e.enc, e.llm, e.backward), e.m, s), "example");
    std::printf("#\n# %s\n", GoldenKey(e.enc, e.llm, e.backward, e.m).c_str());
    const std::string text = GoldenText(s);
    for (size_t begin = 0, end; begin < text.size(); begin = end + 1) {
      end = text.find('\n', begin);
      std::printf("#   %s\n", text.substr(begin, end - begin).c_str());
    }
  }
  std::printf("\n");
  int cases = 0;
  // The line of every valid case of (graph, microbatch counts).
  auto emit = [&](const std::vector<int>& enc, int llm, const std::vector<bool>& backward,
                  std::initializer_list<int> microbatches) {
    const StageGraph g = MakeStageGraph(enc, llm, backward);
    for (int m : microbatches) {
      Schedule s;
      if (!Generate(g, m, s)) continue;
      std::printf("%s fnv1a64=%s\n", GoldenKey(enc, llm, backward, m).c_str(), Fnv1a64(GoldenText(s)).c_str());
      ++cases;
    }
  };
  for (int chains = 0; chains <= 3; ++chains) {
    for (int lengths = 0; lengths < (1 << chains); ++lengths) {  // bit c set: chain c has 2 stages, else 1
      std::vector<int> enc;
      for (int c = 0; c < chains; ++c) enc.push_back(lengths >> c & 1 ? 2 : 1);
      for (int llm = 1; llm <= 3; ++llm) {
        int stages = llm;
        for (int n : enc) stages += n;
        for (int pattern = 0; pattern < (1 << (stages - 1)); ++pattern) {  // bit s: stage s trains; the loss does
          std::vector<bool> backward(stages, true);
          for (int s = 0; s + 1 < stages; ++s) backward[s] = pattern >> s & 1;
          emit(enc, llm, backward, {1, 2, 3, 4, 7});
        }
      }
    }
  }
  // Longer pipelines, as the planner tests and the shipped configs build them (up to 10 stages, up to two encoder
  // chains of up to 4 stages): everything training, the encoders frozen, or only the first stage frozen.
  for (int chains = 0; chains <= 2; ++chains) {
    for (int lengths = 0; lengths < (1 << (2 * chains)); ++lengths) {  // two bits per chain: 1..4 stages
      std::vector<int> enc;
      for (int c = 0; c < chains; ++c) enc.push_back(1 + (lengths >> (2 * c) & 3));
      int encoder_stages = 0;
      for (int n : enc) encoder_stages += n;
      for (int llm = 1; encoder_stages + llm <= 10; ++llm) {
        const int stages = encoder_stages + llm;
        if (llm <= 3 && std::all_of(enc.begin(), enc.end(), [](int n) { return n <= 2; })) continue;  // above
        std::vector<std::vector<bool>> patterns = {std::vector<bool>(stages, true)};
        if (encoder_stages > 0) {
          patterns.emplace_back(stages, true);
          std::fill(patterns.back().begin(), patterns.back().begin() + encoder_stages, false);
        }
        if (chains == 0 && stages > 1) {
          patterns.emplace_back(stages, true);
          patterns.back()[0] = false;
        }
        for (const std::vector<bool>& backward : patterns) emit(enc, llm, backward, {1, 2, 4, 8, 16});
      }
    }
  }
  std::fprintf(stderr, "%d cases\n", cases);
  return 0;
}
