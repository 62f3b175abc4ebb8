#include <catch2/catch.hpp>

#include "cornstarch/pipeline/schedule.h"
#include "cornstarch/util/check.h"

using namespace cornstarch;

namespace {

std::string ErrorOf(const StageGraph& g, const Schedule& s, int m) {
  try {
    ValidateSchedule(g, s, m);
  } catch (const Error& e) {
    return e.what();
  }
  return "<valid>";
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
      const Schedule s = Generate1F1B(g, m);
      CHECK(ErrorOf(g, s, m) == "<valid>");
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
  const Schedule s = Generate1F1B(MakeStageGraph({}, 2, {true, true}), 2);
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
    const Schedule s = Generate1F1B(g, m);
    CHECK(ErrorOf(g, s, m) == "<valid>");
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
  const Schedule s = Generate1F1B(g, 4);
  const Timeline parallel = Simulate(g, s, {1, 1, 1, 1, 1}, {0, 2, 2, 2, 2}, 0.0);
  const Timeline chain = Simulate(MakeStageGraph({}, 4, std::vector<bool>(4, true)),
                                  Generate1F1B(MakeStageGraph({}, 4, std::vector<bool>(4, true)), 4), {1, 1, 1, 1},
                                  {2, 2, 2, 2}, 0.0);
  CHECK(parallel.makespan == Approx(chain.makespan));
}

TEST_CASE("an injected deadlock and an out-of-order action are caught, with the grid", "[schedule]") {
  const StageGraph g = MakeStageGraph({}, 2, {true, true});
  Schedule s = Generate1F1B(g, 2);
  // Stage 0 waits for a gradient before sending the activation that would produce it.
  Schedule deadlock = s;
  auto& st0 = deadlock[0];
  const auto recv = std::find_if(st0.begin(), st0.end(), [](const Action& a) { return a.type == ActionType::kRecvB; });
  const Action moved = *recv;
  st0.erase(recv);
  st0.insert(st0.begin(), moved);
  const std::string err = ErrorOf(g, deadlock, 2);
  CHECK(err.find("deadlock: stage 0 waits forever at 0RECV_B0>1") != std::string::npos);
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
  Schedule wrong = Generate1F1B(frozen, 1);
  wrong[0].push_back({0, ActionType::kBackward, 0, -1});
  CHECK(ErrorOf(frozen, wrong, 1).find("stage 0 has no backward") != std::string::npos);
}
