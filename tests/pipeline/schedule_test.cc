#include <algorithm>
#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>

#include "cornstarch/plan/schedule.h"
#include "cornstarch/base/check.h"
#include "tests/error_of.h"
#include "tests/pipeline/schedule_golden.h"
#include "tests/temp_path.h"

using namespace cornstarch;

namespace {

// What the planner runs: 1F1B's compute, lowered.
Schedule OneF1B(const StageGraph& g, int m) { return AddSendRecv(g, Generate1F1B(g, m)); }

std::string ErrorOf(const StageGraph& g, const Schedule& s, int m) {
  return cornstarch::testing::ErrorOf([&] { ValidateSchedule(g, s, m); });
}

std::string ErrorOfGrouped(const StageGraph& g, const Schedule& s) {
  return cornstarch::testing::ErrorOf([&] { ValidateGroupedSchedule(g, s); });
}

int Count(const std::vector<Action>& actions, ActionType t) {
  return static_cast<int>(std::count_if(actions.begin(), actions.end(), [&](const Action& a) { return a.type == t; }));
}

}  // namespace

TEST_CASE("1F1B on a chain validates and matches the closed-form makespan and bubble", "[schedule]") {
  for (int p = 1; p <= 6; ++p) {
    for (int m = 1; m <= 8; ++m) {
      INFO("stages " << p << " microbatches " << m);
      const StageGraph g = MakeStageGraph({}, p, std::vector<bool>(p, true));
      const Schedule s = OneF1B(g, m);
      CHECK(ErrorOf(g, s, m) == "no error");
      const Timeline t = Simulate(g, s, std::vector<double>(p, 1.0), std::vector<double>(p, 2.0), 0.0);
      if (m >= p) {
        CHECK(t.makespan == Approx((m + p - 1) * 3.0));
        CHECK(t.bubble_fraction == Approx((p - 1.0) / (m + p - 1.0)));
      }
      // Stage s warms up with min(m, p - s - 1) forwards.
      for (int st = 0; st < p; ++st) {
        int leading = 0;
        for (const Action& a : s[st]) {
          if (a.type == ActionType::kBackward) break;
          leading += a.type == ActionType::kForward;
        }
        CHECK(leading == std::min(m, p - st - 1) + (m > p - st - 1 ? 1 : 0));
      }
    }
  }
  const Schedule s = OneF1B(MakeStageGraph({}, 2, {true, true}), 2);
  CHECK(s[0][0].ToString() == "0F0");
  CHECK(s[0][1].ToString() == "0SEND_F0>1");
  CHECK(s[1][0].ToString() == "1RECV_F0>0");
}

TEST_CASE("1F1B on the encoder DAG: branches in parallel, gradients only to stages that train", "[schedule]") {
  // Stages: vision 0 | audio 1, 2 | llm 3, 4. Vision is frozen end to end (no backward); audio trains.
  const std::vector<bool> backward = {false, true, true, true, true};
  const StageGraph g = MakeStageGraph({1, 2}, 2, backward);
  CHECK(g.next[0] == std::vector<int>{3});
  CHECK(g.next[2] == std::vector<int>{3});
  CHECK(g.prev[3] == (std::vector<int>{0, 2}));
  for (int m : {1, 2, 4, 7}) {
    INFO("microbatches " << m);
    const Schedule s = OneF1B(g, m);
    CHECK(ErrorOf(g, s, m) == "no error");
    CHECK(Count(s[0], ActionType::kBackward) == 0);  // frozen branch: no backward actions at all
    CHECK(Count(s[0], ActionType::kRecvB) == 0);
    CHECK(Count(s[3], ActionType::kSendB) == m);     // first LLM stage returns gradients to audio only
    CHECK(Count(s[3], ActionType::kRecvF) == 2 * m);  // and waits for both branches
    // The audio chain's first stage is 4 stages from the loss: 3 warm-up forwards (capped by m).
    int leading = 0;
    for (const Action& a : s[1]) {
      if (a.type == ActionType::kBackward) break;
      leading += a.type == ActionType::kForward;
    }
    CHECK(leading == std::min(m, 3) + (m > 3 ? 1 : 0));
  }
  // Encoders run concurrently: with a free vision stage the makespan is that of the longest path.
  const Schedule s = OneF1B(g, 4);
  const Timeline parallel = Simulate(g, s, {1, 1, 1, 1, 1}, {0, 2, 2, 2, 2}, 0.0);
  const Timeline chain = Simulate(MakeStageGraph({}, 4, std::vector<bool>(4, true)),
                                  OneF1B(MakeStageGraph({}, 4, std::vector<bool>(4, true)), 4), {1, 1, 1, 1},
                                  {2, 2, 2, 2}, 0.0);
  CHECK(parallel.makespan == Approx(chain.makespan));
}

TEST_CASE("Simulate: sends arrive a transfer after the sender's clock, receives wait for them", "[schedule]") {
  const StageGraph g = MakeStageGraph({}, 2, {true, true});
  const Timeline t = Simulate(g, OneF1B(g, 1), {1, 1}, {2, 2}, 0.5);
  // 0F0 [0, 1], arrives 1.5; 1F0 [1.5, 2.5], 1B0 [2.5, 4.5], arrives 5; 0B0 [5, 7].
  REQUIRE(t.ranks[0].size() == 2);
  REQUIRE(t.ranks[1].size() == 2);
  CHECK(t.ranks[1][0].start == Approx(1.5));
  CHECK(t.ranks[1][1].end == Approx(4.5));
  CHECK(t.ranks[0][1].start == Approx(5.0));
  CHECK(t.makespan == Approx(7.0));
  CHECK(t.bubble_fraction == Approx(1.0 - 6.0 / 14.0));
}

TEST_CASE("an injected deadlock and an out-of-order action are caught, with the grid", "[schedule]") {
  const StageGraph g = MakeStageGraph({}, 2, {true, true});
  Schedule s = OneF1B(g, 2);
  // Stage 0 waits for a gradient before sending the activation that would produce it.
  Schedule deadlock = s;
  auto& st0 = deadlock[0];
  const auto recv = std::find_if(st0.begin(), st0.end(), [](const Action& a) { return a.type == ActionType::kRecvB; });
  const Action moved = *recv;
  st0.erase(recv);
  st0.insert(st0.begin(), moved);
  const std::string err = ErrorOf(g, deadlock, 2);
  CHECK(err.find("deadlock: rank 0 waits forever at 0RECV_B0>1") != std::string::npos);
  CHECK(err.find("0RECV_B0>1 <-- ERROR") != std::string::npos);

  Schedule early = s;
  auto& st1 = early[1];
  const auto b = std::find_if(st1.begin(), st1.end(), [](const Action& a) { return a.type == ActionType::kBackward; });
  const Action backward = *b;
  st1.erase(b);
  st1.insert(st1.begin(), backward);
  CHECK(ErrorOf(g, early, 2).find("1B0 comes before its forward") != std::string::npos);

  Schedule unmatched = s;
  unmatched[1].erase(unmatched[1].begin());  // drop 1RECV_F0>0
  CHECK(ErrorOf(g, unmatched, 2).find("send without a matching receive") != std::string::npos);

  const StageGraph frozen = MakeStageGraph({}, 2, {false, true});
  Schedule wrong = OneF1B(frozen, 1);
  wrong[0].push_back({0, ActionType::kBackward, 0, -1});
  CHECK(ErrorOf(frozen, wrong, 1).find("stage 0 has no backward") != std::string::npos);
}

TEST_CASE("1F1B emits compute only, in the order the lowered schedule runs it", "[schedule]") {
  const StageGraph g = MakeStageGraph({1, 2}, 2, {false, true, true, true, true});
  const Schedule compute = Generate1F1B(g, 4);
  const Schedule lowered = AddSendRecv(g, compute);
  for (int s = 0; s < g.num_stages(); ++s) {
    std::vector<Action> kept;
    for (const Action& a : lowered[s]) {
      if (a.type == ActionType::kForward || a.type == ActionType::kBackward) kept.push_back(a);
    }
    CHECK(kept == compute[s]);
  }
  CHECK(testing::ErrorOf([&] { AddSendRecv(g, lowered); }) ==
        "AddSendRecv: the schedule already has sends and receives (0SEND_F0>3); it lowers compute-only schedules "
        "(F and B)");
}

TEST_CASE("AddSendRecv(Generate1F1B) reproduces every golden schedule of the generator that placed its own sends",
          "[schedule]") {
  // Printed by tests/pipeline/make_1f1b_golden.cc; lines are "enc=1,2 llm=3 backward=011111 m=4 fnv1a64=<hex>".
  std::ifstream golden("tests/pipeline/testdata/1f1b_golden.txt");
  REQUIRE(golden);
  int cases = 0;
  for (std::string line; std::getline(golden, line);) {
    if (line.empty() || line[0] == '#') continue;
    INFO(line);
    std::istringstream fields(line);
    std::string enc_field, llm_field, backward_field, m_field;
    REQUIRE(fields >> enc_field >> llm_field >> backward_field >> m_field);
    auto value = [](const std::string& field, const std::string& name) {
      REQUIRE(field.rfind(name + "=", 0) == 0);
      return field.substr(name.size() + 1);
    };
    std::vector<int> enc;
    std::istringstream chains(value(enc_field, "enc"));
    for (std::string n; std::getline(chains, n, ',');) {
      if (n != "-") enc.push_back(std::stoi(n));
    }
    std::vector<bool> backward;
    for (char c : value(backward_field, "backward")) backward.push_back(c == '1');
    const int llm = std::stoi(value(llm_field, "llm"));
    const int m = std::stoi(value(m_field, "m"));
    const StageGraph g = MakeStageGraph(enc, llm, backward);
    const Schedule lowered = OneF1B(g, m);
    CHECK(testing::GoldenKey(enc, llm, backward, m) + " fnv1a64=" + testing::Fnv1a64(testing::GoldenText(lowered)) ==
          line);
    // On NCCL the same schedule runs by groups with unbuffered sends, and so does evaluation's forward-only one.
    CHECK(ErrorOfGrouped(g, lowered) == "no error");
    const StageGraph forward_only = MakeStageGraph(enc, llm, std::vector<bool>(backward.size(), false));
    CHECK(ErrorOfGrouped(forward_only, OneF1B(forward_only, m)) == "no error");
    ++cases;
  }
  CHECK(cases == 3555);
}

TEST_CASE("actions and schedules parse from the text they print", "[schedule]") {
  int actions = 0;
  for (const std::vector<int>& enc : std::vector<std::vector<int>>{{}, {1}, {1, 2}, {2, 1, 2}}) {
    for (int llm = 1; llm <= 4; ++llm) {
      int stages = llm;
      for (int n : enc) stages += n;
      for (int frozen = 0; frozen < 2; ++frozen) {  // the first stage of every encoder chain frozen, or none
        std::vector<bool> backward(stages, true);
        for (int c = 0, s = 0; frozen && c < static_cast<int>(enc.size()); s += enc[c++]) backward[s] = false;
        const StageGraph g = MakeStageGraph(enc, llm, backward);
        for (int m = 1; m <= 12; m += 1 + m / 3) {
          for (const Schedule& s : {Generate1F1B(g, m), OneF1B(g, m)}) {
            for (const auto& stage : s) {
              for (const Action& a : stage) {
                CHECK(ParseAction(a.ToString()) == a);
                ++actions;
              }
            }
            CHECK(ParseSchedule(FormatSchedule(s), "round trip") == s);
          }
        }
      }
    }
  }
  CHECK(actions > 10000);
  CHECK(ParseAction("1RECV_B0>2") == Action{1, ActionType::kRecvB, 0, 2});
  CHECK(ParseAction("12F345") == Action{12, ActionType::kForward, 345, -1});
  CHECK(FormatSchedule(Generate1F1B(MakeStageGraph({}, 2, {true, true}), 2)) ==
        "rank 0: 0F0 0F1 0B0 0B1\nrank 1: 1F0 1B0 1F1 1B1\n");
  CHECK(ParseSchedule("# two ranks\n\nrank 0: 0F0 # forward only\n  rank 1:\n", "x") ==
        Schedule{{{0, ActionType::kForward, 0, -1}}, {}});
}

TEST_CASE("malformed actions and schedule text name the problem", "[schedule]") {
  auto action = [](const std::string& text) { return testing::ErrorOf([&] { ParseAction(text); }); };
  const std::string expected =
      " (expected <stage><F|B|SEND_F|RECV_F|SEND_B|RECV_B><microbatch>, then >peer for a send or receive, as in 2F0 "
      "or 0SEND_F3>2)";
  CHECK(action("3X0") == "bad action \"3X0\": no action type after the stage" + expected);
  CHECK(action("0SEND_F1") == "bad action \"0SEND_F1\": SEND_F has no >peer" + expected);
  CHECK(action("") == "bad action \"\": no stage number first" + expected);
  CHECK(action("F0") == "bad action \"F0\": no stage number first" + expected);
  CHECK(action("0F") == "bad action \"0F\": no microbatch number after F" + expected);
  CHECK(action("0F0>1") == "bad action \"0F0>1\": \">1\" left over" + expected);
  CHECK(action("0RECV_B1<2") == "bad action \"0RECV_B1<2\": no peer stage after the microbatch" + expected);
  CHECK(action("-1F0") == "bad action \"-1F0\": no stage number first" + expected);

  auto schedule = [](const std::string& text) { return testing::ErrorOf([&] { ParseSchedule(text, "s.txt"); }); };
  CHECK(schedule("rank 0: 0F0\nrank 2: 2F0\n") == "s.txt:2: rank 2 comes before rank 1 (one line per pipeline rank, "
                                                   "from rank 0 up)");
  CHECK(schedule("rank 0: 0F0\n# again\nrank 0: 0B0\n") == "s.txt:3: rank 0 is listed twice (first on line 1)");
  CHECK(schedule("rank 0: 0F0 0X0\n") == "s.txt:1: bad action \"0X0\": no action type after the stage" + expected);
  CHECK(schedule("rank 0 0F0\n") == "s.txt:1: expected \"rank <n>: <actions>\", got \"rank 0 0F0\"");
  CHECK(schedule("stage 0: 0F0\n") == "s.txt:1: expected \"rank <n>: <actions>\", got \"stage 0: 0F0\"");
  CHECK(schedule("0: 0F0\n") == "s.txt:1: expected \"rank <n>: <actions>\", got \"0: 0F0\"");
  CHECK(schedule("# nothing\n\n") == "s.txt: no \"rank <n>: <actions>\" line");

  // A line for a rank the pipeline does not have, too few lines, an action on the wrong rank, a file that is not
  // there.
  const StageGraph g = MakeStageGraph({}, 2, {true, true});
  const std::string path = testing::TempPath("three-ranks.txt");
  std::ofstream(path) << "rank 0: 0F0 0B0\nrank 1: 1F0 1B0\nrank 2: 2F0 2B0\n";
  CHECK(testing::ErrorOf([&] { LoadScheduleFile(path, g, 1); }) ==
        path + ": rank 2 does not exist: the pipeline has ranks 0..1");
  std::ofstream(path) << "rank 0: 0F0 0B0\n";
  CHECK(testing::ErrorOf([&] { LoadScheduleFile(path, g, 1); }) ==
        path + ": no line for rank 1: the pipeline has ranks 0..1");
  std::ofstream(path) << "rank 0: 0F0 0B0\nrank 1: 0F0\n";
  CHECK(testing::ErrorOf([&] { LoadScheduleFile(path, g, 1); }).find(
            "invalid schedule: 0F0 is listed on rank 1, but stage 0 runs on rank 0") != std::string::npos);
  std::ofstream(path) << "rank 0: 0F0 0B0 1F0\nrank 1: 1B0\n";
  CHECK(testing::ErrorOf([&] { LoadScheduleFile(path, g, 1); }).find(
            "invalid schedule: 1RECV_F0>0 is listed on rank 0, but stage 1 runs on rank 1") != std::string::npos);
  std::ofstream(path) << "rank 0: 0F0 0B0\nrank 1: 5F0\n";
  CHECK(testing::ErrorOf([&] { LoadScheduleFile(path, g, 1); }) ==
        "AddSendRecv: 5F0: the pipeline has stages 0..1");
  CHECK(testing::ErrorOf([&] { LoadScheduleFile("no/such/schedule.txt", g, 1); }) ==
        "schedule file no/such/schedule.txt: cannot be read");
  // Valid text, invalid schedule: the validator's message, after the file.
  std::ofstream(path) << "rank 0: 0F0 0B0\nrank 1: 1F0\n";
  CHECK(testing::ErrorOf([&] { LoadScheduleFile(path, g, 1); }).rfind(path + ": invalid schedule: stage 1 misses "
                                                                       "the backward of microbatch 0", 0) == 0);
}

TEST_CASE("sends and receives must follow the graph's edges", "[schedule]") {
  const StageGraph g = MakeStageGraph({1}, 2, {true, true, true});  // 0 -> 1 -> 2
  Schedule s = OneF1B(g, 2);
  for (auto& stage : s) {
    for (Action& a : stage) {
      if (a.type == ActionType::kSendF && a.stage == 1) a.peer = 0;  // activations back to the producer
      if (a.type == ActionType::kRecvF && a.stage == 0) a.peer = 1;
    }
  }
  CHECK(ErrorOf(g, s, 2).find("invalid schedule: 1SEND_F0>0: stage 0 does not consume stage 1") != std::string::npos);
}

TEST_CASE("a hand-written GPipe schedule loads, validates and simulates", "[schedule]") {
  const StageGraph g = MakeStageGraph({}, 2, {true, true});
  const Schedule written = ParseSchedule(
      "# GPipe: all forwards, then all backwards\n"
      "rank 0: 0F0 0F1 0F2 0F3 0B0 0B1 0B2 0B3\n"
      "rank 1: 1F0 1F1 1F2 1F3 1B0 1B1 1B2 1B3\n",
      "test");
  const Schedule gpipe = AddSendRecv(g, written);
  CHECK(ErrorOf(g, gpipe, 4) == "no error");
  CHECK(LoadScheduleFile("configs/schedules/gpipe-2x4.txt", g, 4) == gpipe);
  // Forwards 1 and backwards 2 per stage: stage 1 starts at 1 and ends its last backward at 13, stage 0 its at 15,
  // the same step as 1F1B at equal stage times.
  const Timeline t = Simulate(g, gpipe, {1, 1}, {2, 2}, 0.0);
  CHECK(t.makespan == Approx(15.0));
  CHECK(t.makespan == Approx(Simulate(g, OneF1B(g, 4), {1, 1}, {2, 2}, 0.0).makespan));
  CHECK(t.ranks[1].front().start == Approx(1.0));
  // A schedule file may also spell out its communication: it is then taken as written.
  const std::string path = testing::TempPath("gpipe-lowered.txt");
  std::ofstream(path) << "# lowered by hand\n" << FormatSchedule(gpipe);
  CHECK(LoadScheduleFile(path, g, 4) == gpipe);
}

TEST_CASE("NCCL groups: each run of sends and receives between computes is one group", "[schedule]") {
  const StageGraph g = MakeStageGraph({}, 2, {true, true});
  const Schedule s = OneF1B(g, 4);
  auto texts = [&](int stage) {
    std::vector<std::string> out;
    for (const CommGroup& group : CommGroups(s[stage])) {
      std::string text;
      for (int i = group.begin; i < group.end; ++i) text += (text.empty() ? "" : " ") + s[stage][i].ToString();
      out.push_back(text);
    }
    return out;
  };
  // The steady state pairs stage 0's activation send with its gradient receive, and stage 1's gradient send with
  // its next activation receive: the two groups match each other.
  CHECK(texts(0) == std::vector<std::string>{"0SEND_F0>1", "0SEND_F1>1 0RECV_B0>1", "0SEND_F2>1 0RECV_B1>1",
                                             "0SEND_F3>1 0RECV_B2>1", "0RECV_B3>1"});
  CHECK(texts(1) == std::vector<std::string>{"1RECV_F0>0", "1SEND_B0>0 1RECV_F1>0", "1SEND_B1>0 1RECV_F2>0",
                                             "1SEND_B2>0 1RECV_F3>0", "1SEND_B3>0"});
  CHECK(CommGroups({}).empty());
  CHECK(CommGroups(Generate1F1B(g, 2)[0]).empty());
}

TEST_CASE("NCCL dry run: sends between two stages must be received in the order they were sent", "[schedule]") {
  const StageGraph g = MakeStageGraph({}, 2, {true, true});
  Schedule s = AddSendRecv(g, ParseSchedule("rank 0: 0F0 0F1 0B0 0B1\nrank 1: 1F0 1F1 1B0 1B1\n", "test"));
  REQUIRE(ErrorOfGrouped(g, s) == "no error");
  // Stage 1 receives both activations up front, microbatch 1 first: buffered sends with tags (MPI) allow it, but
  // NCCL would put microbatch 0's activation into microbatch 1's buffer.
  s[1] = {ParseAction("1RECV_F1>0"), ParseAction("1RECV_F0>0"), ParseAction("1F0"), ParseAction("1F1"),
          ParseAction("1B0"), ParseAction("1SEND_B0>0"), ParseAction("1B1"), ParseAction("1SEND_B1>0")};
  CHECK(ErrorOf(g, s, 2) == "no error");
  const std::string err = ErrorOfGrouped(g, s);
  CHECK(err.find("invalid schedule for NCCL: 1RECV_F1>0 is matched with another message (operation 1 from "
                 "rank 0 to rank 1)") != std::string::npos);
  CHECK(err.find("1RECV_F1>0 <-- ERROR") != std::string::npos);

  // The deadlock the buffered dry run finds is one here too.
  Schedule deadlock = OneF1B(g, 2);
  auto& st0 = deadlock[0];
  const auto recv = std::find_if(st0.begin(), st0.end(), [](const Action& a) { return a.type == ActionType::kRecvB; });
  std::rotate(st0.begin(), recv, recv + 1);  // 0RECV_B0>1 first
  REQUIRE(st0.front().ToString() == "0RECV_B0>1");
  CHECK(ErrorOfGrouped(g, deadlock).find("deadlock: rank 0 waits forever in the group starting at 0RECV_B0>1") !=
        std::string::npos);
}

TEST_CASE("interleaved 1F1B: LLM stages round-robin over the ranks, Megatron's order, valid for MPI and NCCL",
          "[schedule][interleaved]") {
  // Two LLM ranks of two virtual stages each: rank 0 runs stages 0 and 2, rank 1 stages 1 and 3. Rounds of
  // g = 2 microbatches; rank 0 warms up with (v - 1) g + 2 (p - 1) = 4 forwards, rank 1 with 2.
  const StageGraph g = MakeStageGraph({}, 4, std::vector<bool>(4, true), 2);
  CHECK(g.rank == std::vector<int>{0, 1, 0, 1});
  CHECK(g.StagesOf(1) == std::vector<int>{1, 3});
  CHECK(FormatSchedule(Generate1F1B(g, 2)) ==
        "rank 0: 0F0 0F1 2F0 2F1 2B0 2B1 0B0 0B1\nrank 1: 1F0 1F1 3F0 3B0 3F1 3B1 1B0 1B1\n");

  // Encoder stages keep ranks of their own in front of the LLM's.
  CHECK(MakeStageGraph({1, 2}, 6, std::vector<bool>(9, true), 3).rank ==
        std::vector<int>{0, 1, 2, 3, 4, 3, 4, 3, 4});
  int cases = 0;
  for (const std::vector<int>& enc : std::vector<std::vector<int>>{{}, {1}, {1, 2}, {2, 1}}) {
    for (int p = 2; p <= 4; ++p) {
      for (int v = 2; v <= 3; ++v) {
        int stages = p * v;
        for (int n : enc) stages += n;
        for (int frozen = 0; frozen < 2; ++frozen) {  // every encoder chain's first stage frozen, or none
          std::vector<bool> backward(stages, true);
          for (int c = 0, s = 0; frozen && c < static_cast<int>(enc.size()); s += enc[c++]) backward[s] = false;
          const StageGraph graph = MakeStageGraph(enc, p * v, backward, v);
          const StageGraph forward_only = MakeStageGraph(enc, p * v, std::vector<bool>(stages, false), v);
          for (int m = 1; m <= 12; ++m) {
            if (!InterleavingFits(p, m)) {
              CHECK_THROWS_AS(Generate1F1B(graph, m), Error);
              continue;
            }
            INFO("encoders " << enc.size() << " llm ranks " << p << " virtual " << v << " frozen " << frozen
                             << " microbatches " << m);
            const Schedule s = OneF1B(graph, m);
            REQUIRE(ErrorOf(graph, s, m) == "no error");
            CHECK(ErrorOfGrouped(forward_only, OneF1B(forward_only, m)) == "no error");
            CHECK(ErrorOfGrouped(graph, s) == "no error");
            CHECK(ParseSchedule(FormatSchedule(s), "round trip") == s);
            ++cases;
          }
        }
      }
    }
  }
  CHECK(cases > 300);
}

TEST_CASE("interleaved 1F1B shrinks the bubble v-fold at equal work per rank", "[schedule][interleaved]") {
  // Each rank's share of the LLM costs forward 1 and backward 2 per microbatch, split over its v stages.
  for (int p = 2; p <= 4; ++p) {
    for (int v = 1; v <= 4; ++v) {
      for (int m = p; m <= 4 * p; m += p) {
        INFO("ranks " << p << " virtual " << v << " microbatches " << m);
        const StageGraph g = MakeStageGraph({}, p * v, std::vector<bool>(p * v, true), v);
        const Schedule s = OneF1B(g, m);
        REQUIRE(ErrorOf(g, s, m) == "no error");
        const Timeline t =
            Simulate(g, s, std::vector<double>(p * v, 1.0 / v), std::vector<double>(p * v, 2.0 / v), 0.0);
        // Megatron-LM's bubble: (p - 1) stage times of 3 / v, next to the m microbatches' 3 each.
        CHECK(t.makespan == Approx(3.0 * m + 3.0 * (p - 1) / v));
        CHECK(t.bubble_fraction == Approx((p - 1.0) / v / (m + (p - 1.0) / v)));
      }
    }
  }
}

TEST_CASE("interleaving that cannot run is refused with the setting to change", "[schedule][interleaved]") {
  CHECK(testing::ErrorOf([] { MakeStageGraph({}, 2, {true, true}, 2); }) ==
        "parallel.virtual_stages: 2 LLM stages per rank need a multiple of them over at least two ranks, not 2 LLM "
        "stages");
  CHECK(testing::ErrorOf([] { MakeStageGraph({}, 5, std::vector<bool>(5, true), 2); }).rfind(
            "parallel.virtual_stages", 0) == 0);
  CHECK(InterleavingFits(2, 6));
  CHECK(InterleavingFits(4, 6));   // one round of all 6
  CHECK_FALSE(InterleavingFits(2, 5));  // rounds of 2 leave one over
  CHECK_FALSE(InterleavingFits(1, 4));
  const StageGraph g = MakeStageGraph({}, 4, std::vector<bool>(4, true), 2);
  CHECK(testing::ErrorOf([&] { Generate1F1B(g, 5); }) ==
        "interleaved 1F1B: 5 microbatches per step do not split into rounds over 2 LLM ranks (need a multiple of "
        "floor(M / ranks); change train.global_batch_size or train.micro_batch_size)");
  // A rank whose stages disagree on having a backward (a frozen first LLM piece under a frozen everything-else).
  const StageGraph mixed = MakeStageGraph({}, 4, {false, true, true, true}, 2);
  CHECK(testing::ErrorOf([&] { Generate1F1B(mixed, 2); }).find("LLM stage 2 has a backward unlike") !=
        std::string::npos);
}
