#include "cornstarch/train/trace.h"

#include <torch/torch.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "cornstarch/dist/runtime.h"
#include "cornstarch/train/chrome_trace.h"
#include "cornstarch/io/safetensors.h"
#include "cornstarch/base/check.h"

namespace cornstarch {

namespace {

// An event travels to rank 0 as one row of doubles: phase (-1 for an action), action type, stage, microbatch,
// peer, step, start, end.
constexpr int kFields = 8;

const char* PhaseName(TracePhase phase) {
  switch (phase) {
    case TracePhase::kData: return "data";
    case TracePhase::kGradSync: return "grad sync";
    case TracePhase::kOptimizer: return "optimizer";
    case TracePhase::kBucketReduce: return "bucket reduction";
  }
  return "?";
}

const char* Category(ActionType t) {
  return t == ActionType::kForward ? "forward" : t == ActionType::kBackward ? "backward"
         : t == ActionType::kRecvF || t == ActionType::kRecvB ? "wait" : "send";
}

// Planned (top) and measured (bottom) compute spans per pipeline rank, each scaled to its own makespan.
std::string Svg(const PipelinePlan& plan, const std::vector<std::vector<std::pair<double, double>>>& fwd,
                const std::vector<std::vector<std::pair<double, double>>>& bwd, double measured_makespan) {
  const int ranks = plan.graph.num_ranks();
  const double width = 1000, row = 18, gap = 40, left = 90;
  const double height = 2 * ranks * row + 3 * gap;
  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(left + width + 20) +
                    "\" height=\"" + std::to_string(height) + "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  auto rect = [&](double x0, double x1, double y, const char* color) {
    svg += "<rect x=\"" + std::to_string(left + x0) + "\" y=\"" + std::to_string(y) + "\" width=\"" +
           std::to_string(std::max(0.5, x1 - x0)) + "\" height=\"" + std::to_string(row - 3) + "\" fill=\"" + color +
           "\"/>\n";
  };
  auto label = [&](double y, const std::string& text) {
    svg += "<text x=\"4\" y=\"" + std::to_string(y + row - 6) + "\">" + text + "</text>\n";
  };
  svg += "<text x=\"4\" y=\"" + std::to_string(gap - 12) + "\">planned (simulated) schedule; blue forward, orange "
         "backward</text>\n";
  for (int r = 0; r < ranks; ++r) {
    const double y = gap + r * row;
    label(y, "pp rank " + std::to_string(r));
    for (const Timeline::Span& span : plan.timeline.ranks[r]) {
      const double k = width / plan.timeline.makespan;
      rect(span.start * k, span.end * k, y, span.action.type == ActionType::kForward ? "#4c78a8" : "#f58518");
    }
  }
  const double top = 2 * gap + ranks * row;
  svg += "<text x=\"4\" y=\"" + std::to_string(top - 12) + "\">measured, last traced step (" +
         std::to_string(static_cast<int64_t>(measured_makespan / 1e3)) + " ms)</text>\n";
  for (int r = 0; r < ranks; ++r) {
    const double y = top + r * row, k = width / measured_makespan;
    label(y, "pp rank " + std::to_string(r));
    for (const auto& [a, b] : fwd[r]) rect(a * k, b * k, y, "#4c78a8");
    for (const auto& [a, b] : bwd[r]) rect(a * k, b * k, y, "#f58518");
  }
  return svg + "</svg>\n";
}

}  // namespace

double TraceRecorder::NowUs() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void TraceRecorder::Phase(TracePhase phase, int64_t step, double start_us, double end_us) {
  events_.push_back({phase, Action{}, step, start_us, end_us});
}

void TraceRecorder::Actions(const std::vector<ActionTiming>& timings, int64_t step, double start_us) {
  for (const ActionTiming& t : timings) {
    events_.push_back({std::nullopt, t.action, step, start_us + t.start * 1e6, start_us + t.end * 1e6});
  }
}

void TraceRecorder::Write(DistRuntime& runtime, const PipelinePlan& plan, const std::string& path) const {
  Communicator& world = runtime.world();
  torch::Tensor count = torch::full({1}, static_cast<double>(events_.size()), torch::kDouble);
  world.AllReduce(count, ReduceOp::kMax);
  const int64_t n = static_cast<int64_t>(count.item<double>());
  torch::Tensor mine = torch::full({n, kFields}, -2.0, torch::kDouble);  // phase -2: padding, no event
  for (size_t i = 0; i < events_.size(); ++i) {
    const Event& e = events_[i];
    const double row[kFields] = {e.phase ? static_cast<double>(*e.phase) : -1.0,
                                 static_cast<double>(e.action.type),
                                 static_cast<double>(e.action.stage),
                                 static_cast<double>(e.action.microbatch),
                                 static_cast<double>(e.action.peer),
                                 static_cast<double>(e.step),
                                 e.start_us,
                                 e.end_us};
    std::copy(row, row + kFields, mine[static_cast<int64_t>(i)].data_ptr<double>());
  }
  torch::Tensor all = torch::zeros({world.size() * n * kFields}, torch::kDouble);
  world.AllGather(mine.reshape({-1}), all);
  if (runtime.rank() != 0) return;
  const double* a = all.data_ptr<double>();
  double origin = 1e300;
  int64_t last_step = -1;
  for (int64_t i = 0; i < world.size() * n; ++i) {
    if (a[i * kFields] == -2) continue;
    origin = std::min(origin, a[i * kFields + 6]);
    last_step = std::max(last_step, static_cast<int64_t>(a[i * kFields + 5]));
  }
  ChromeTrace trace;
  const int ranks = plan.graph.num_ranks();
  std::vector<std::vector<std::pair<double, double>>> fwd(ranks), bwd(ranks);  // per pipeline rank
  double step_begin = 1e300, step_end = 0;
  for (int r = 0; r < world.size(); ++r) {
    const ParallelDims::Coord c = runtime.dims().CoordOf(r);
    trace.NameProcess(r, "rank " + std::to_string(r) + " (pp " + std::to_string(c.pp) + ", dp " +
                             std::to_string(c.dp) + ", cp " + std::to_string(c.cp) + ", tp " +
                             std::to_string(c.tp) + ")");
    trace.NameThread(r, 0, "step");
    trace.NameThread(r, 1, "gradient buckets");
    for (int64_t i = 0; i < n; ++i) {
      const double* e = a + (r * n + i) * kFields;
      if (e[0] == -2) continue;
      const Action action{static_cast<int>(e[2]), static_cast<ActionType>(static_cast<int>(e[1])),
                          static_cast<int>(e[3]), static_cast<int>(e[4])};
      const int64_t step = static_cast<int64_t>(e[5]);
      const double start = e[6], end = e[7];
      if (e[0] >= 0) {
        // Bucket reductions run beside the computation: a track of their own.
        const TracePhase phase = static_cast<TracePhase>(static_cast<int>(e[0]));
        trace.Span(PhaseName(phase), "step", r, phase == TracePhase::kBucketReduce ? 1 : 0, start - origin,
                   end - start, {{"step", step}});
        continue;
      }
      trace.Span(action.ToString(), Category(action.type), r, 0, start - origin, end - start, {{"step", step}});
      // The picture: the last traced step of the first dp/cp replica.
      if (step != last_step || c.dp != 0 || c.cp != 0 || c.tp != 0) continue;
      step_begin = std::min(step_begin, start);
      step_end = std::max(step_end, end);
      if (action.type == ActionType::kForward) fwd[c.pp].push_back({start, end});
      if (action.type == ActionType::kBackward) bwd[c.pp].push_back({start, end});
    }
  }
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  WriteFileAtomically(path, trace.Json());
  if (ranks > 1 && step_end > step_begin) {
    for (auto* spans : {&fwd, &bwd}) {
      for (auto& rank : *spans) {
        for (auto& [x, y] : rank) x -= step_begin, y -= step_begin;
      }
    }
    WriteFileAtomically(path + ".svg", Svg(plan, fwd, bwd, step_end - step_begin));
  }
}

}  // namespace cornstarch
