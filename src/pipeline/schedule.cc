#include "cornstarch/pipeline/schedule.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "cornstarch/util/check.h"

namespace cornstarch {

namespace {

const char* TypeName(ActionType t) {
  switch (t) {
    case ActionType::kForward: return "F";
    case ActionType::kBackward: return "B";
    case ActionType::kSendF: return "SEND_F";
    case ActionType::kRecvF: return "RECV_F";
    case ActionType::kSendB: return "SEND_B";
    case ActionType::kRecvB: return "RECV_B";
  }
  return "?";
}

bool IsSend(ActionType t) { return t == ActionType::kSendF || t == ActionType::kSendB; }
bool IsRecv(ActionType t) { return t == ActionType::kRecvF || t == ActionType::kRecvB; }
ActionType SendFor(ActionType recv) { return recv == ActionType::kRecvF ? ActionType::kSendF : ActionType::kSendB; }

// Message identity: (type of the send, from, to, microbatch).
using Message = std::tuple<ActionType, int, int, int>;
Message MessageOf(const Action& a) {
  return IsSend(a.type) ? Message{a.type, a.stage, a.peer, a.microbatch}
                        : Message{SendFor(a.type), a.peer, a.stage, a.microbatch};
}

// The step x stage grid, marking `bad` (stage, index) with "<-- ERROR".
std::string Grid(const Schedule& s, int bad_stage, int bad_index, const std::string& why) {
  std::string out = why + "\nstep";
  for (size_t st = 0; st < s.size(); ++st) out += "\tstage " + std::to_string(st);
  size_t steps = 0;
  for (const auto& actions : s) steps = std::max(steps, actions.size());
  for (size_t i = 0; i < steps; ++i) {
    out += "\n" + std::to_string(i);
    for (size_t st = 0; st < s.size(); ++st) {
      out += "\t";
      if (i < s[st].size()) out += s[st][i].ToString();
      if (static_cast<int>(st) == bad_stage && static_cast<int>(i) == bad_index) out += " <-- ERROR";
    }
  }
  return out;
}

// Distance in stages from s to the loss, s included.
int Depth(const StageGraph& g, int s) {
  int depth = 1;
  while (!g.next[s].empty()) s = g.next[s].front(), ++depth;
  return depth;
}

}  // namespace

std::string Action::ToString() const {
  std::string s = std::to_string(stage) + TypeName(type) + std::to_string(microbatch);
  if (peer >= 0) s += ">" + std::to_string(peer);
  return s;
}

StageGraph MakeStageGraph(const std::vector<int>& encoder_stages, int llm_stages, const std::vector<bool>& has_backward) {
  int total = llm_stages;
  for (int n : encoder_stages) total += n;
  CS_CHECK(llm_stages >= 1 && static_cast<int>(has_backward.size()) == total, "stage graph of ", total, " stages");
  StageGraph g;
  g.next.resize(total);
  g.prev.resize(total);
  g.has_backward = has_backward;
  const int first_llm = total - llm_stages;
  auto link = [&](int a, int b) {
    g.next[a].push_back(b);
    g.prev[b].push_back(a);
  };
  for (int c = 0, s = 0; c < static_cast<int>(encoder_stages.size()); s += encoder_stages[c++]) {
    CS_CHECK(encoder_stages[c] >= 1, "encoder chain ", c, " has no stage");
    for (int i = s; i + 1 < s + encoder_stages[c]; ++i) link(i, i + 1);
    link(s + encoder_stages[c] - 1, first_llm);
  }
  for (int s = first_llm; s + 1 < total; ++s) link(s, s + 1);
  return g;
}

Schedule Generate1F1B(const StageGraph& g, int m) {
  CS_CHECK(m >= 1, "microbatches=", m);
  Schedule schedule(g.num_stages());
  for (int s = 0; s < g.num_stages(); ++s) {
    std::vector<Action>& out = schedule[s];
    auto forward = [&](int mb) {
      for (int p : g.prev[s]) out.push_back({s, ActionType::kRecvF, mb, p});
      out.push_back({s, ActionType::kForward, mb, -1});
      for (int n : g.next[s]) out.push_back({s, ActionType::kSendF, mb, n});
    };
    auto backward = [&](int mb) {
      for (int n : g.next[s]) out.push_back({s, ActionType::kRecvB, mb, n});
      out.push_back({s, ActionType::kBackward, mb, -1});
      for (int p : g.prev[s]) {
        if (g.has_backward[p]) out.push_back({s, ActionType::kSendB, mb, p});
      }
    };
    if (!g.has_backward[s]) {
      for (int mb = 0; mb < m; ++mb) forward(mb);
      continue;
    }
    const int warmup = std::min(m, Depth(g, s) - 1);
    int f = 0, b = 0;
    while (f < warmup) forward(f++);
    while (f < m) forward(f++), backward(b++);
    while (b < m) backward(b++);
  }
  return schedule;
}

void ValidateSchedule(const StageGraph& g, const Schedule& schedule, int m) {
  CS_CHECK(static_cast<int>(schedule.size()) == g.num_stages(), "schedule has ", schedule.size(), " stages");
  std::map<Message, std::pair<int, int>> sends, recvs;  // message -> (stage, index)
  for (int s = 0; s < g.num_stages(); ++s) {
    std::vector<int> forwards(m, 0), backwards(m, 0);
    for (int i = 0; i < static_cast<int>(schedule[s].size()); ++i) {
      const Action& a = schedule[s][i];
      auto fail = [&](const std::string& why) { throw Error(Grid(schedule, s, i, "invalid schedule: " + why)); };
      if (a.stage != s) fail(a.ToString() + " is listed on stage " + std::to_string(s));
      if (a.microbatch < 0 || a.microbatch >= m) fail(a.ToString() + ": microbatch outside [0, " + std::to_string(m) + ")");
      if (a.type == ActionType::kForward && forwards[a.microbatch]++) fail(a.ToString() + " repeats a forward");
      if (a.type == ActionType::kBackward) {
        if (!g.has_backward[s]) fail(a.ToString() + ": stage " + std::to_string(s) + " has no backward");
        if (!forwards[a.microbatch]) fail(a.ToString() + " comes before its forward");
        if (backwards[a.microbatch]++) fail(a.ToString() + " repeats a backward");
      }
      if (IsSend(a.type) || IsRecv(a.type)) {
        auto& table = IsSend(a.type) ? sends : recvs;
        if (!table.emplace(MessageOf(a), std::make_pair(s, i)).second) fail(a.ToString() + " is listed twice");
      }
    }
    for (int mb = 0; mb < m; ++mb) {
      if (!forwards[mb] || (g.has_backward[s] && !backwards[mb])) {
        throw Error(Grid(schedule, s, -1, "invalid schedule: stage " + std::to_string(s) + " misses the " +
                                              (forwards[mb] ? "backward" : "forward") + " of microbatch " +
                                              std::to_string(mb)));
      }
    }
  }
  for (const auto& [msg, where] : sends) {
    if (!recvs.count(msg)) {
      throw Error(Grid(schedule, where.first, where.second, "invalid schedule: send without a matching receive"));
    }
  }
  for (const auto& [msg, where] : recvs) {
    if (!sends.count(msg)) {
      throw Error(Grid(schedule, where.first, where.second, "invalid schedule: receive without a matching send"));
    }
  }
  // Dry run: sends are buffered (they never block), a receive waits for its send.
  std::vector<size_t> pc(g.num_stages(), 0);
  std::set<Message> delivered;
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < g.num_stages(); ++s) {
      while (pc[s] < schedule[s].size()) {
        const Action& a = schedule[s][pc[s]];
        if (IsRecv(a.type) && !delivered.count(MessageOf(a))) break;
        if (IsSend(a.type)) delivered.insert(MessageOf(a));
        ++pc[s];
        progress = true;
      }
    }
  }
  for (int s = 0; s < g.num_stages(); ++s) {
    if (pc[s] < schedule[s].size()) {
      throw Error(Grid(schedule, s, static_cast<int>(pc[s]),
                       "invalid schedule: deadlock: stage " + std::to_string(s) + " waits forever at " +
                           schedule[s][pc[s]].ToString()));
    }
  }
}

Timeline Simulate(const StageGraph& g, const Schedule& schedule, const std::vector<double>& forward,
                  const std::vector<double>& backward, double transfer) {
  const int n = g.num_stages();
  Timeline t;
  t.stages.resize(n);
  std::vector<size_t> pc(n, 0);
  std::vector<double> clock(n, 0.0);
  std::map<Message, double> arrival;
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < n; ++s) {
      while (pc[s] < schedule[s].size()) {
        const Action& a = schedule[s][pc[s]];
        if (IsRecv(a.type)) {
          const auto it = arrival.find(MessageOf(a));
          if (it == arrival.end()) break;
          clock[s] = std::max(clock[s], it->second);
        } else if (IsSend(a.type)) {
          arrival[MessageOf(a)] = clock[s] + transfer;
        } else {
          const double d = a.type == ActionType::kForward ? forward[s] : backward[s];
          t.stages[s].push_back({a, clock[s], clock[s] + d});
          clock[s] += d;
        }
        ++pc[s];
        progress = true;
      }
    }
  }
  double busy = 0;
  for (int s = 0; s < n; ++s) {
    CS_CHECK(pc[s] == schedule[s].size(), "Simulate needs a validated schedule");
    t.makespan = std::max(t.makespan, clock[s]);
    for (const auto& span : t.stages[s]) busy += span.end - span.start;
  }
  t.bubble_fraction = t.makespan > 0 ? 1.0 - busy / (n * t.makespan) : 0.0;
  return t;
}

}  // namespace cornstarch
