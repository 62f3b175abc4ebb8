#include "cornstarch/plan/schedule.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "cornstarch/base/check.h"

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

constexpr ActionType kActionTypes[] = {ActionType::kForward, ActionType::kBackward, ActionType::kSendF,
                                       ActionType::kRecvF,   ActionType::kSendB,    ActionType::kRecvB};

bool IsSend(ActionType t) { return t == ActionType::kSendF || t == ActionType::kSendB; }
bool IsRecv(ActionType t) { return t == ActionType::kRecvF || t == ActionType::kRecvB; }
bool IsCompute(ActionType t) { return t == ActionType::kForward || t == ActionType::kBackward; }
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

// Reads a number of 1 to 9 digits (no sign: stages and microbatches count from 0) at text[i], advancing i.
bool ReadNumber(const std::string& text, size_t& i, int& out) {
  size_t end = i;
  while (end < text.size() && end - i < 9 && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
  if (end == i) return false;
  out = std::stoi(text.substr(i, end - i));
  i = end;
  return true;
}

// Runs `schedule` as the ranks would: every stage its actions in order, a send never blocks (it is buffered), a
// receive waits until its send has run. Calls run(stage, action) in an order that respects both, and returns for
// every stage how far it got: the length of its list, or the index of the receive it waits at forever.
std::vector<size_t> Replay(const Schedule& schedule, const std::function<void(int, const Action&)>& run) {
  std::vector<size_t> pc(schedule.size(), 0);
  std::set<Message> sent;
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t s = 0; s < schedule.size(); ++s) {
      while (pc[s] < schedule[s].size()) {
        const Action& a = schedule[s][pc[s]];
        if (IsRecv(a.type) && !sent.count(MessageOf(a))) break;
        if (IsSend(a.type)) sent.insert(MessageOf(a));
        run(static_cast<int>(s), a);
        ++pc[s];
        progress = true;
      }
    }
  }
  return pc;
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

Action ParseAction(const std::string& text) {
  auto bad = [&](const std::string& why) {
    return Error("bad action \"" + text + "\": " + why +
                 " (expected <stage><F|B|SEND_F|RECV_F|SEND_B|RECV_B><microbatch>, then >peer for a send or receive, "
                 "as in 2F0 or 0SEND_F3>2)");
  };
  Action a;
  size_t i = 0;
  if (!ReadNumber(text, i, a.stage)) throw bad("no stage number first");
  const ActionType* type = std::find_if(std::begin(kActionTypes), std::end(kActionTypes), [&](ActionType t) {
    return text.compare(i, std::strlen(TypeName(t)), TypeName(t)) == 0;  // no name is a prefix of another
  });
  if (type == std::end(kActionTypes)) throw bad("no action type after the stage");
  a.type = *type;
  i += std::strlen(TypeName(a.type));
  if (!ReadNumber(text, i, a.microbatch)) throw bad(std::string("no microbatch number after ") + TypeName(a.type));
  if (!IsCompute(a.type)) {
    if (i == text.size()) throw bad(std::string(TypeName(a.type)) + " has no >peer");
    if (text[i++] != '>' || !ReadNumber(text, i, a.peer)) throw bad("no peer stage after the microbatch");
  }
  if (i != text.size()) throw bad("\"" + text.substr(i) + "\" left over");
  return a;
}

std::string FormatSchedule(const Schedule& schedule) {
  std::string text;
  for (size_t s = 0; s < schedule.size(); ++s) {
    text += "stage " + std::to_string(s) + ":";
    for (const Action& a : schedule[s]) text += " " + a.ToString();
    text += "\n";
  }
  return text;
}

Schedule ParseSchedule(const std::string& text, const std::string& source) {
  Schedule schedule;
  std::vector<int> line_of;  // [stage] -> the line listing it
  std::istringstream lines(text);
  int number = 0;
  for (std::string line; std::getline(lines, line);) {
    const std::string where = source + ":" + std::to_string(++number) + ": ";
    std::istringstream words(line.substr(0, line.find('#')));
    std::string head, label;
    if (!(words >> head)) continue;  // blank or comment only
    words >> label;
    size_t i = 0;
    int stage = -1;
    if (head != "stage" || !ReadNumber(label, i, stage) || label.substr(i) != ":") {
      throw Error(where + "expected \"stage <n>: <actions>\", got \"" + line + "\"");
    }
    if (stage < static_cast<int>(schedule.size())) {
      throw Error(where + "stage " + std::to_string(stage) + " is listed twice (first on line " +
                  std::to_string(line_of[stage]) + ")");
    }
    if (stage > static_cast<int>(schedule.size())) {
      throw Error(where + "stage " + std::to_string(stage) + " comes before stage " + std::to_string(schedule.size()) +
                  " (one line per stage, from stage 0 up)");
    }
    line_of.push_back(number);
    schedule.emplace_back();
    for (std::string word; words >> word;) {
      try {
        schedule.back().push_back(ParseAction(word));
      } catch (const Error& e) {
        throw Error(where + e.what());
      }
      if (schedule.back().back().stage != stage) {
        throw Error(where + word + " belongs to stage " + std::to_string(schedule.back().back().stage) +
                    ", not stage " + std::to_string(stage));
      }
    }
  }
  if (schedule.empty()) throw Error(source + ": no \"stage <n>: <actions>\" line");
  return schedule;
}

Schedule LoadScheduleFile(const std::string& path, const StageGraph& g, int m) {
  std::ifstream in(path);
  if (!in) throw Error("schedule file " + path + ": cannot be read");
  std::stringstream text;
  text << in.rdbuf();
  Schedule schedule = ParseSchedule(text.str(), path);
  const int listed = static_cast<int>(schedule.size());
  if (listed != g.num_stages()) {
    throw Error(path + ": " + (listed > g.num_stages() ? "stage " + std::to_string(g.num_stages()) + " does not exist"
                                                       : "no line for stage " + std::to_string(listed)) +
                ": the pipeline has stages 0.." + std::to_string(g.last()));
  }
  const bool compute_only = std::all_of(schedule.begin(), schedule.end(), [](const std::vector<Action>& actions) {
    return std::all_of(actions.begin(), actions.end(), [](const Action& a) { return IsCompute(a.type); });
  });
  if (compute_only) schedule = AddSendRecv(g, schedule);
  try {
    ValidateSchedule(g, schedule, m);
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
  return schedule;
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
    auto forward = [&](int mb) { schedule[s].push_back({s, ActionType::kForward, mb, -1}); };
    auto backward = [&](int mb) { schedule[s].push_back({s, ActionType::kBackward, mb, -1}); };
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

Schedule AddSendRecv(const StageGraph& g, const Schedule& compute) {
  CS_CHECK(static_cast<int>(compute.size()) == g.num_stages(), "schedule has ", compute.size(), " stages");
  Schedule schedule(g.num_stages());
  for (int s = 0; s < g.num_stages(); ++s) {
    std::vector<Action>& out = schedule[s];
    for (const Action& a : compute[s]) {
      if (!IsCompute(a.type)) {
        throw Error("AddSendRecv: the schedule already has sends and receives (" + a.ToString() +
                    "); it lowers compute-only schedules (F and B)");
      }
      const int mb = a.microbatch;
      if (a.type == ActionType::kForward) {
        for (int p : g.prev[s]) out.push_back({s, ActionType::kRecvF, mb, p});
        out.push_back(a);
        for (int n : g.next[s]) out.push_back({s, ActionType::kSendF, mb, n});
      } else {
        for (int n : g.next[s]) out.push_back({s, ActionType::kRecvB, mb, n});
        out.push_back(a);
        for (int p : g.prev[s]) {
          if (g.has_backward[p]) out.push_back({s, ActionType::kSendB, mb, p});
        }
      }
    }
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
      if (!IsCompute(a.type)) {
        const bool downstream = a.type == ActionType::kSendF || a.type == ActionType::kRecvB;
        const std::vector<int>& peers = downstream ? g.next[s] : g.prev[s];
        if (std::find(peers.begin(), peers.end(), a.peer) == peers.end()) {
          fail(a.ToString() + ": stage " + std::to_string(a.peer) + " does not " +
               (downstream ? "consume stage " : "feed stage ") + std::to_string(s));
        }
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
  const std::vector<size_t> reached = Replay(schedule, [](int, const Action&) {});
  for (int s = 0; s < g.num_stages(); ++s) {
    if (reached[s] < schedule[s].size()) {
      throw Error(Grid(schedule, s, static_cast<int>(reached[s]),
                       "invalid schedule: deadlock: stage " + std::to_string(s) + " waits forever at " +
                           schedule[s][reached[s]].ToString()));
    }
  }
}

std::vector<CommGroup> CommGroups(const std::vector<Action>& actions) {
  std::vector<CommGroup> groups;
  const int n = static_cast<int>(actions.size());
  for (int i = 0; i < n;) {
    if (IsCompute(actions[i].type)) {
      ++i;
      continue;
    }
    CommGroup g{i, i};
    while (g.end < n && !IsCompute(actions[g.end].type)) ++g.end;
    groups.push_back(g);
    i = g.end;
  }
  return groups;
}

void ValidateGroupedSchedule(const Schedule& schedule) {
  const int n = static_cast<int>(schedule.size());
  std::vector<std::vector<CommGroup>> groups(n);
  for (int s = 0; s < n; ++s) groups[s] = CommGroups(schedule[s]);
  // Per directed pair (from, to): the messages of the sends and of the receives posted so far, in posting order.
  std::map<std::pair<int, int>, std::vector<Message>> sends, recvs;
  auto channel = [](const Action& a) {
    return IsSend(a.type) ? std::make_pair(a.stage, a.peer) : std::make_pair(a.peer, a.stage);
  };
  // Where each posted operation sits in its channel's order.
  std::vector<std::vector<size_t>> slot(n);
  for (int s = 0; s < n; ++s) slot[s].assign(schedule[s].size(), 0);
  std::vector<size_t> next_group(n, 0);  // the group a stage posts next (or has posted and waits on)
  std::vector<bool> posted(n, false);
  std::vector<int> pc(n, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < n; ++s) {
      while (pc[s] < static_cast<int>(schedule[s].size())) {
        if (IsCompute(schedule[s][pc[s]].type)) {
          ++pc[s];
          progress = true;
          continue;
        }
        const CommGroup& g = groups[s][next_group[s]];
        if (!posted[s]) {
          for (int i = g.begin; i < g.end; ++i) {
            const Action& a = schedule[s][i];
            std::vector<Message>& mine = (IsSend(a.type) ? sends : recvs)[channel(a)];
            const std::vector<Message>& theirs = (IsSend(a.type) ? recvs : sends)[channel(a)];
            slot[s][i] = mine.size();
            mine.push_back(MessageOf(a));
            if (slot[s][i] < theirs.size() && theirs[slot[s][i]] != mine.back()) {
              throw Error(Grid(schedule, s, i,
                               "invalid schedule for NCCL: " + a.ToString() +
                                   " is matched with another message (operation " + std::to_string(slot[s][i] + 1) +
                                   " from stage " + std::to_string(channel(a).first) + " to stage " +
                                   std::to_string(channel(a).second) +
                                   "): sends and receives between two stages must come in the same order"));
            }
          }
          posted[s] = true;
          progress = true;
        }
        bool done = true;
        for (int i = g.begin; i < g.end && done; ++i) {
          const Action& a = schedule[s][i];
          done = slot[s][i] < (IsSend(a.type) ? recvs : sends)[channel(a)].size();
        }
        if (!done) break;
        pc[s] = g.end;
        posted[s] = false;
        ++next_group[s];
        progress = true;
      }
    }
  }
  for (int s = 0; s < n; ++s) {
    if (pc[s] < static_cast<int>(schedule[s].size())) {
      throw Error(Grid(schedule, s, pc[s],
                       "invalid schedule for NCCL: deadlock: stage " + std::to_string(s) +
                           " waits forever in the group starting at " + schedule[s][pc[s]].ToString()));
    }
  }
}

Timeline Simulate(const StageGraph& g, const Schedule& schedule, const std::vector<double>& forward,
                  const std::vector<double>& backward, double transfer) {
  const int n = g.num_stages();
  Timeline t;
  t.stages.resize(n);
  std::vector<double> clock(n, 0.0);
  std::map<Message, double> arrival;
  const std::vector<size_t> reached = Replay(schedule, [&](int s, const Action& a) {
    if (IsRecv(a.type)) {
      clock[s] = std::max(clock[s], arrival.at(MessageOf(a)));
    } else if (IsSend(a.type)) {
      arrival[MessageOf(a)] = clock[s] + transfer;
    } else {
      const double d = a.type == ActionType::kForward ? forward[s] : backward[s];
      t.stages[s].push_back({a, clock[s], clock[s] + d});
      clock[s] += d;
    }
  });
  double busy = 0;
  for (int s = 0; s < n; ++s) {
    CS_CHECK(reached[s] == schedule[s].size(), "Simulate needs a validated schedule");
    t.makespan = std::max(t.makespan, clock[s]);
    for (const auto& span : t.stages[s]) busy += span.end - span.start;
  }
  t.bubble_fraction = t.makespan > 0 ? 1.0 - busy / (n * t.makespan) : 0.0;
  return t;
}

}  // namespace cornstarch
