#include "cornstarch/plan/schedule.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
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

// The step x rank grid, marking `bad` (rank, index) with "<-- ERROR".
std::string Grid(const Schedule& s, int bad_rank, int bad_index, const std::string& why) {
  std::string out = why + "\nstep";
  for (size_t r = 0; r < s.size(); ++r) out += "\trank " + std::to_string(r);
  size_t steps = 0;
  for (const auto& actions : s) steps = std::max(steps, actions.size());
  for (size_t i = 0; i < steps; ++i) {
    out += "\n" + std::to_string(i);
    for (size_t r = 0; r < s.size(); ++r) {
      out += "\t";
      if (i < s[r].size()) out += s[r][i].ToString();
      if (static_cast<int>(r) == bad_rank && static_cast<int>(i) == bad_index) out += " <-- ERROR";
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

// Runs `schedule` as the ranks would: every rank its actions in order, a send never blocks (it is buffered), a
// receive waits until its send has run. Calls run(rank, action) in an order that respects both, and returns for
// every rank how far it got: the length of its list, or the index of the receive it waits at forever.
std::vector<size_t> Replay(const Schedule& schedule, const std::function<void(int, const Action&)>& run) {
  std::vector<size_t> pc(schedule.size(), 0);
  std::set<Message> sent;
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t r = 0; r < schedule.size(); ++r) {
      while (pc[r] < schedule[r].size()) {
        const Action& a = schedule[r][pc[r]];
        if (IsRecv(a.type) && !sent.count(MessageOf(a))) break;
        if (IsSend(a.type)) sent.insert(MessageOf(a));
        run(static_cast<int>(r), a);
        ++pc[r];
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
  for (size_t r = 0; r < schedule.size(); ++r) {
    text += "rank " + std::to_string(r) + ":";
    for (const Action& a : schedule[r]) text += " " + a.ToString();
    text += "\n";
  }
  return text;
}

Schedule ParseSchedule(const std::string& text, const std::string& source) {
  Schedule schedule;
  std::vector<int> line_of;  // [rank] -> the line listing it
  std::istringstream lines(text);
  int number = 0;
  for (std::string line; std::getline(lines, line);) {
    const std::string where = source + ":" + std::to_string(++number) + ": ";
    std::istringstream words(line.substr(0, line.find('#')));
    std::string head, label;
    if (!(words >> head)) continue;  // blank or comment only
    words >> label;
    size_t i = 0;
    int rank = -1;
    if (head != "rank" || !ReadNumber(label, i, rank) || label.substr(i) != ":") {
      throw Error(where + "expected \"rank <n>: <actions>\", got \"" + line + "\"");
    }
    if (rank < static_cast<int>(schedule.size())) {
      throw Error(where + "rank " + std::to_string(rank) + " is listed twice (first on line " +
                  std::to_string(line_of[rank]) + ")");
    }
    if (rank > static_cast<int>(schedule.size())) {
      throw Error(where + "rank " + std::to_string(rank) + " comes before rank " + std::to_string(schedule.size()) +
                  " (one line per pipeline rank, from rank 0 up)");
    }
    line_of.push_back(number);
    schedule.emplace_back();
    for (std::string word; words >> word;) {
      try {
        schedule.back().push_back(ParseAction(word));
      } catch (const Error& e) {
        throw Error(where + e.what());
      }
    }
  }
  if (schedule.empty()) throw Error(source + ": no \"rank <n>: <actions>\" line");
  return schedule;
}

Schedule LoadScheduleFile(const std::string& path, const StageGraph& g, int m) {
  std::ifstream in(path);
  if (!in) throw Error("schedule file " + path + ": cannot be read");
  std::stringstream text;
  text << in.rdbuf();
  Schedule schedule = ParseSchedule(text.str(), path);
  const int listed = static_cast<int>(schedule.size());
  if (listed != g.num_ranks()) {
    throw Error(path + ": " + (listed > g.num_ranks() ? "rank " + std::to_string(g.num_ranks()) + " does not exist"
                                                      : "no line for rank " + std::to_string(listed)) +
                ": the pipeline has ranks 0.." + std::to_string(g.num_ranks() - 1));
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

std::vector<int> StageGraph::StagesOf(int r) const {
  std::vector<int> stages;
  for (int s = 0; s < num_stages(); ++s) {
    if (rank[s] == r) stages.push_back(s);
  }
  return stages;
}

StageGraph MakeStageGraph(const std::vector<int>& encoder_stages, int llm_stages, const std::vector<bool>& has_backward,
                          int virtual_stages) {
  int total = llm_stages;
  for (int n : encoder_stages) total += n;
  CS_CHECK(llm_stages >= 1 && static_cast<int>(has_backward.size()) == total, "stage graph of ", total, " stages");
  const bool one_rank = virtual_stages > 1 && llm_stages < 2 * virtual_stages;
  if (virtual_stages < 1 || llm_stages % virtual_stages != 0 || one_rank) {
    throw Error("parallel.virtual_stages: " + std::to_string(virtual_stages) + " LLM stages per rank need a multiple "
                "of them over at least two ranks, not " + std::to_string(llm_stages) + " LLM stages");
  }
  StageGraph g;
  g.next.resize(total);
  g.prev.resize(total);
  g.has_backward = has_backward;
  const int first_llm = total - llm_stages;
  g.first_llm = first_llm;
  g.virtual_stages = virtual_stages;
  const int llm_ranks = llm_stages / virtual_stages;
  for (int s = 0; s < total; ++s) g.rank.push_back(s < first_llm ? s : first_llm + (s - first_llm) % llm_ranks);
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

bool InterleavingFits(int llm_ranks, int m) { return llm_ranks >= 2 && m >= 1 && m % std::max(1, m / llm_ranks) == 0; }

namespace {

// The 1F1B shape of `total` forwards and backwards: min(total, warmup) forwards, then forward and backward
// alternating, then the remaining backwards (only the forwards without `backward`). nth(k, type) is the k-th
// forward's or backward's action.
std::vector<Action> OneFOneB(int total, int warmup, bool backward, const std::function<Action(int, ActionType)>& nth) {
  std::vector<Action> out;
  if (!backward) warmup = total;
  int f = 0, b = 0;
  while (f < std::min(total, warmup)) out.push_back(nth(f++, ActionType::kForward));
  while (f < total) out.push_back(nth(f++, ActionType::kForward)), out.push_back(nth(b++, ActionType::kBackward));
  while (backward && b < total) out.push_back(nth(b++, ActionType::kBackward));
  return out;
}

// One stage's plain 1F1B list over microbatches 0..m-1.
std::vector<Action> PlainStage(const StageGraph& g, int s, int m, int warmup) {
  return OneFOneB(m, warmup, g.has_backward[s], [s](int k, ActionType type) { return Action{s, type, k, -1}; });
}

// Interleaved 1F1B for LLM rank r: its k-th forward (backward) is of microbatch (k / gv) g + k % g on its
// (k / g) % v-th stage (counted from its last stage for backwards).
std::vector<Action> InterleavedLlmRank(const StageGraph& g, int r, int m) {
  const int v = g.virtual_stages, p = (g.num_stages() - g.first_llm) / v;
  if (!InterleavingFits(p, m)) {
    throw Error("interleaved 1F1B: " + std::to_string(m) + " microbatches per step do not split into rounds over " +
                std::to_string(p) + " LLM ranks (need a multiple of floor(M / ranks); change train.global_batch_size "
                "or train.micro_batch_size)");
  }
  const int group = m / std::max(1, m / p);
  auto action = [&](int k, ActionType type) {
    const int chunk = (k / group) % v;
    const int stage = g.first_llm + (type == ActionType::kForward ? chunk : v - 1 - chunk) * p + r;
    return Action{stage, type, (k / (group * v)) * group + k % group, -1};
  };
  const std::vector<int> stages = g.StagesOf(g.first_llm + r);
  const bool backward = g.has_backward[stages.front()];
  for (int s : stages) {
    if (g.has_backward[s] != backward) {
      throw Error("interleaved 1F1B: LLM stage " + std::to_string(s) + (backward ? " has no" : " has a") +
                  " backward unlike the rank's others (freeze all of the LLM's first layers or none)");
    }
  }
  return OneFOneB(m * v, (v - 1) * group + 2 * (p - 1 - r), backward, action);
}

}  // namespace

Schedule Generate1F1B(const StageGraph& g, int m) {
  CS_CHECK(m >= 1, "microbatches=", m);
  Schedule schedule(g.num_ranks());
  if (g.virtual_stages == 1) {
    for (int s = 0; s < g.num_stages(); ++s) schedule[g.rank[s]] = PlainStage(g, s, m, Depth(g, s) - 1);
    return schedule;
  }
  const int first_llm_rank = g.rank[g.first_llm];
  for (int r = first_llm_rank; r < g.num_ranks(); ++r) schedule[r] = InterleavedLlmRank(g, r - first_llm_rank, m);
  // An encoder's last stage must have run every microbatch the first LLM stage runs before each of its backwards
  // (the k-th is microbatch k's): lead_k of them before B_k. Warmed up by w, it runs w + 1 + k forwards by then,
  // so w = max(lead_k - k) leaves it one ahead, as plain 1F1B does; each stage further up the chain one more.
  int lead = 0, runs = 0, warmup = 0;
  for (const Action& a : schedule[first_llm_rank]) {
    if (a.stage != g.first_llm) continue;
    if (a.type == ActionType::kForward) ++runs;
    if (a.type == ActionType::kBackward) warmup = std::max(warmup, runs - lead++);
  }
  for (int s = g.first_llm - 1; s >= 0; --s) {
    const int above = Depth(g, s) - Depth(g, g.first_llm) - 1;  // stages between s and the first LLM stage
    schedule[g.rank[s]] = PlainStage(g, s, m, warmup + above);
  }
  return schedule;
}

Schedule AddSendRecv(const StageGraph& g, const Schedule& compute) {
  CS_CHECK(static_cast<int>(compute.size()) == g.num_ranks(), "schedule has ", compute.size(), " ranks");
  for (const std::vector<Action>& actions : compute) {
    for (const Action& a : actions) {
      if (!IsCompute(a.type)) {
        throw Error("AddSendRecv: the schedule already has sends and receives (" + a.ToString() +
                    "); it lowers compute-only schedules (F and B)");
      }
      if (a.stage < 0 || a.stage >= g.num_stages()) {
        throw Error("AddSendRecv: " + a.ToString() + ": the pipeline has stages 0.." + std::to_string(g.last()));
      }
    }
  }
  // A compute action's receives (from every producer before a forward, from every consumer before a backward) and
  // its sends (to every consumer after a forward, to every producer with a backward after a backward).
  auto recvs = [&](const Action& a) {
    std::vector<Action> out;
    if (a.type == ActionType::kForward) {
      for (int p : g.prev[a.stage]) out.push_back({a.stage, ActionType::kRecvF, a.microbatch, p});
    } else {
      for (int n : g.next[a.stage]) out.push_back({a.stage, ActionType::kRecvB, a.microbatch, n});
    }
    return out;
  };
  auto sends = [&](const Action& a) {
    std::vector<Action> out;
    if (a.type == ActionType::kForward) {
      for (int n : g.next[a.stage]) out.push_back({a.stage, ActionType::kSendF, a.microbatch, n});
    } else {
      for (int p : g.prev[a.stage]) {
        if (g.has_backward[p]) out.push_back({a.stage, ActionType::kSendB, a.microbatch, p});
      }
    }
    return out;
  };
  // Ranks work in steps, after each of which they post one exchange: what the step produced, and receipts. A rank
  // with one stage takes each action as a step, so without interleaving every action is lowered in place: its
  // receives, itself, its sends. A rank with several stages (interleaved) takes a forward directly followed by a
  // backward as one step, as Megatron-LM's interleaved 1F1B does (but not its last forward with its first
  // backward: there the backward's gradient needs that forward's output sent first). On NCCL a send waits for its
  // receive, and receives posted only where their data is consumed can leave two ranks each waiting to send to
  // the other (the ring of interleaved stages does). So there each receive is posted with the receiver's first
  // exchange after its data is sent, as Megatron's lockstep exchanges do, found by a dry run (Simulate at forward
  // 1, backward 2) of the schedule with receives where consumed: the data is there by then in that run, so no
  // rank waits where it did not, and sender and receiver meet in time.
  struct Where {
    int rank, index;  // into compute[rank]
  };
  std::map<std::tuple<int, ActionType, int>, Where> where;  // (stage, F/B, microbatch) -> where it runs
  std::vector<std::vector<int>> step_of(g.num_ranks());     // [rank][index] -> step
  for (int r = 0; r < g.num_ranks(); ++r) {
    const std::vector<Action>& c = compute[r];
    const bool several = g.StagesOf(r).size() > 1;
    const auto forwards =
        std::count_if(c.begin(), c.end(), [](const Action& a) { return a.type == ActionType::kForward; });
    for (int i = 0, step = 0; i < static_cast<int>(c.size()); ++step) {
      const bool pair = several && i + 1 < static_cast<int>(c.size()) && i + 1 != forwards &&
                        c[i].type == ActionType::kForward && c[i + 1].type == ActionType::kBackward;
      for (const int end = i + (pair ? 2 : 1); i < end; ++i) {
        step_of[r].push_back(step);
        where[{c[i].stage, c[i].type, c[i].microbatch}] = {r, i};
      }
    }
  }
  // The producer of a receive (a missing one is the validator's to report: the receive stays where consumed).
  auto producer_of = [&](const Action& in) {
    const auto it =
        where.find({in.peer, in.type == ActionType::kRecvF ? ActionType::kForward : ActionType::kBackward,
                    in.microbatch});
    return it == where.end() ? std::optional<Where>() : std::optional<Where>(it->second);
  };
  // `exchange(r, i, in)`: after which of rank r's steps the receive `in` of its action i is posted (the exchange
  // before step t is "after step t - 1"; t = 0 is before the first step).
  auto lower = [&](const std::function<int(int, int, const Action&)>& exchange) {
    Schedule out(g.num_ranks());
    for (int r = 0; r < g.num_ranks(); ++r) {
      const std::vector<Action>& c = compute[r];
      const int steps = c.empty() ? 0 : step_of[r].back() + 1;
      // Per exchange t: the sends of step t - 1, then the receives (ordered as their producers run, so the
      // receives from one peer come in the order it sends), then step t's computes.
      std::vector<std::vector<Action>> sent(steps + 1);
      std::vector<std::vector<std::pair<std::pair<int, int>, Action>>> received(steps + 1);
      for (int i = 0; i < static_cast<int>(c.size()); ++i) {
        for (const Action& a : sends(c[i])) sent[step_of[r][i] + 1].push_back(a);
        for (const Action& in : recvs(c[i])) {
          const std::optional<Where> p = producer_of(in);
          received[exchange(r, i, in)].push_back({p ? std::make_pair(p->rank, p->index) : std::make_pair(r, i), in});
        }
      }
      for (int t = 0, i = 0; t <= steps; ++t) {
        std::stable_sort(received[t].begin(), received[t].end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
        out[r].insert(out[r].end(), sent[t].begin(), sent[t].end());
        for (const auto& [order, a] : received[t]) out[r].push_back(a);
        for (; i < static_cast<int>(c.size()) && step_of[r][i] == t; ++i) out[r].push_back(c[i]);
      }
    }
    return out;
  };
  const Schedule consumed = lower([&](int r, int i, const Action&) { return step_of[r][i]; });
  if (g.virtual_stages == 1) return consumed;
  const std::vector<size_t> reached = Replay(consumed, [](int, const Action&) {});
  for (int r = 0; r < g.num_ranks(); ++r) {
    if (reached[r] < consumed[r].size()) return consumed;  // the validator says what is wrong
  }
  const Timeline dry = Simulate(g, consumed, std::vector<double>(g.num_stages(), 1.0),
                                std::vector<double>(g.num_stages(), 2.0), 0.0);
  // When each rank reaches the exchange before its step t: the end of step t - 1 (0 before the first).
  std::vector<std::vector<double>> arrives(g.num_ranks());
  for (int r = 0; r < g.num_ranks(); ++r) {
    arrives[r].push_back(0.0);
    for (size_t i = 0; i < compute[r].size(); ++i) {
      const bool step_ends = i + 1 == compute[r].size() || step_of[r][i + 1] != step_of[r][i];
      if (step_ends) arrives[r].push_back(dry.ranks[r][i].end);
    }
  }
  return lower([&](int r, int i, const Action& in) {
    const std::optional<Where> p = producer_of(in);
    const int consumed_at = step_of[r][i];
    if (!p) return consumed_at;
    const double sent_at = dry.ranks[p->rank][p->index].end;
    int t = 0;
    while (t < consumed_at && arrives[r][t] < sent_at) ++t;
    return t;
  });
}

void ValidateSchedule(const StageGraph& g, const Schedule& schedule, int m) {
  CS_CHECK(static_cast<int>(schedule.size()) == g.num_ranks(), "schedule has ", schedule.size(), " ranks");
  std::map<Message, std::pair<int, int>> sends, recvs;  // message -> (rank, index)
  // [stage][microbatch] -> how many forwards and backwards
  std::vector<std::vector<int>> forward_count(g.num_stages(), std::vector<int>(m, 0)), backward_count = forward_count;
  for (int r = 0; r < g.num_ranks(); ++r) {
    for (int i = 0; i < static_cast<int>(schedule[r].size()); ++i) {
      const Action& a = schedule[r][i];
      const int s = a.stage;
      auto fail = [&](const std::string& why) { throw Error(Grid(schedule, r, i, "invalid schedule: " + why)); };
      if (s < 0 || s >= g.num_stages()) fail(a.ToString() + ": no stage " + std::to_string(s));
      if (g.rank[s] != r) {
        fail(a.ToString() + " is listed on rank " + std::to_string(r) + ", but stage " + std::to_string(s) +
             " runs on rank " + std::to_string(g.rank[s]));
      }
      if (a.microbatch < 0 || a.microbatch >= m) {
        fail(a.ToString() + ": microbatch outside [0, " + std::to_string(m) + ")");
      }
      std::vector<int>& forwards = forward_count[s];
      std::vector<int>& backwards = backward_count[s];
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
        if (!table.emplace(MessageOf(a), std::make_pair(r, i)).second) fail(a.ToString() + " is listed twice");
      }
    }
  }
  for (int s = 0; s < g.num_stages(); ++s) {
    for (int mb = 0; mb < m; ++mb) {
      const bool forward = forward_count[s][mb] > 0;
      if (!forward || (g.has_backward[s] && !backward_count[s][mb])) {
        throw Error(Grid(schedule, g.rank[s], -1, "invalid schedule: stage " + std::to_string(s) + " misses the " +
                                                      (forward ? "backward" : "forward") + " of microbatch " +
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
  for (int r = 0; r < g.num_ranks(); ++r) {
    if (reached[r] < schedule[r].size()) {
      throw Error(Grid(schedule, r, static_cast<int>(reached[r]),
                       "invalid schedule: deadlock: rank " + std::to_string(r) + " waits forever at " +
                           schedule[r][reached[r]].ToString()));
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

void ValidateGroupedSchedule(const StageGraph& graph, const Schedule& schedule) {
  const int n = static_cast<int>(schedule.size());
  std::vector<std::vector<CommGroup>> groups(n);
  for (int s = 0; s < n; ++s) groups[s] = CommGroups(schedule[s]);
  // Per directed pair of ranks (from, to): the messages of the sends and of the receives posted so far, in
  // posting order.
  std::map<std::pair<int, int>, std::vector<Message>> sends, recvs;
  auto channel = [&](const Action& a) {
    const int self = graph.rank[a.stage], peer = graph.rank[a.peer];
    return IsSend(a.type) ? std::make_pair(self, peer) : std::make_pair(peer, self);
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
                                   " from rank " + std::to_string(channel(a).first) + " to rank " +
                                   std::to_string(channel(a).second) +
                                   "): sends and receives between two ranks must come in the same order"));
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
                       "invalid schedule for NCCL: deadlock: rank " + std::to_string(s) +
                           " waits forever in the group starting at " + schedule[s][pc[s]].ToString()));
    }
  }
}

Timeline Simulate(const StageGraph& g, const Schedule& schedule, const std::vector<double>& forward,
                  const std::vector<double>& backward, double transfer) {
  const int n = g.num_ranks();
  Timeline t;
  t.ranks.resize(n);
  std::vector<double> clock(n, 0.0);
  std::map<Message, double> arrival;
  const std::vector<size_t> reached = Replay(schedule, [&](int r, const Action& a) {
    if (IsRecv(a.type)) {
      clock[r] = std::max(clock[r], arrival.at(MessageOf(a)));
    } else if (IsSend(a.type)) {
      arrival[MessageOf(a)] = clock[r] + transfer;
    } else {
      const double d = a.type == ActionType::kForward ? forward[a.stage] : backward[a.stage];
      t.ranks[r].push_back({a, clock[r], clock[r] + d});
      clock[r] += d;
    }
  });
  double busy = 0;
  for (int r = 0; r < n; ++r) {
    CS_CHECK(reached[r] == schedule[r].size(), "Simulate needs a validated schedule");
    t.makespan = std::max(t.makespan, clock[r]);
    for (const auto& span : t.ranks[r]) busy += span.end - span.start;
  }
  t.bubble_fraction = t.makespan > 0 ? 1.0 - busy / (n * t.makespan) : 0.0;
  return t;
}

}  // namespace cornstarch
