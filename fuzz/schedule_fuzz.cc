// Hand-written pipeline schedules (parallel.schedule_file; plan/schedule.h: the text form, lowering, the
// validator, the NCCL dry run, the simulator) on arbitrary text, against three stage graphs: a 2-stage chain, two
// encoder chains feeding a 2-stage LLM, and one encoder in front of an interleaved LLM (2 ranks x 2 stages).
// A text with one line per rank of a graph is lowered when it lists compute only, validated for as many
// microbatches as it names, and, when valid, dry-run for NCCL and simulated. Seeds: generated schedules of those
// graphs (compute only and lowered) and configs/schedules/.
#include <algorithm>
#include <vector>

#include "cornstarch/plan/schedule.h"
#include "fuzz/refuse_cleanly.h"

namespace {

using namespace cornstarch;

const std::vector<StageGraph>& Graphs() {
  static const std::vector<StageGraph> graphs = {MakeStageGraph({}, 2, {true, true}),
                                                 MakeStageGraph({1, 1}, 2, {true, false, true, true}),
                                                 MakeStageGraph({1}, 4, {false, true, true, true, true}, 2)};
  return graphs;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return fuzz::RefuseCleanly([&] {
    const Schedule text = ParseSchedule(fuzz::Text(data, size), "fuzz.txt");
    int microbatches = 1;
    for (const std::vector<Action>& actions : text) {
      for (const Action& a : actions) microbatches = std::max(microbatches, a.microbatch + 1);
    }
    if (microbatches > 64) return;  // the validator's tables are per microbatch
    for (const StageGraph& g : Graphs()) {
      if (static_cast<int>(text.size()) != g.num_ranks()) continue;
      const bool compute_only = std::all_of(text.begin(), text.end(), [](const std::vector<Action>& actions) {
        return std::all_of(actions.begin(), actions.end(), [](const Action& a) {
          return a.type == ActionType::kForward || a.type == ActionType::kBackward;
        });
      });
      try {
        const Schedule s = compute_only ? AddSendRecv(g, text) : text;
        ValidateSchedule(g, s, microbatches);
        ValidateGroupedSchedule(g, s);
        Simulate(g, s, std::vector<double>(g.num_stages(), 1.0), std::vector<double>(g.num_stages(), 2.0), 0.5);
      } catch (const Error&) {
        // Refused for this graph; the next may take it.
      }
    }
  });
}
