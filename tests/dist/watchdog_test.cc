// The watchdog that ends a job whose NCCL operation never completes, with stand-in operations: one that completes
// is dropped without a report, one that stays pending is reported once its timeout has passed (not before), one
// that fails is reported with its error, and pending operations never keep the destructor waiting.
#include "cornstarch/dist/watchdog.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

using namespace cornstarch;
using Clock = std::chrono::steady_clock;

namespace {

struct Reports {
  std::mutex mu;
  std::vector<std::string> messages;
  std::vector<Clock::time_point> at;
  void Add(const std::string& m) {
    std::lock_guard<std::mutex> lock(mu);
    messages.push_back(m);
    at.push_back(Clock::now());
  }
  size_t size() {
    std::lock_guard<std::mutex> lock(mu);
    return messages.size();
  }
};

// Waits up to 10 s for `done`.
template <typename F>
bool Eventually(F done) {
  const auto until = Clock::now() + std::chrono::seconds(10);
  while (!done()) {
    if (Clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace

TEST_CASE("an operation that completes is dropped without a report", "[watchdog]") {
  Reports reports;
  Watchdog dog(5.0, [&](const std::string& m) { reports.Add(m); });
  std::atomic<int> polls{0};
  dog.Watch("allreduce", [&] {
    // Pending for a few polls, then done.
    return Watchdog::Status{++polls < 5 ? Watchdog::State::kPending : Watchdog::State::kDone, {}};
  });
  REQUIRE(Eventually([&] { return dog.pending() == 0; }));
  CHECK(polls >= 5);
  CHECK(reports.size() == 0);
}

TEST_CASE("an operation pending past its timeout is reported by name, once, and not before", "[watchdog]") {
  Reports reports;
  const double timeout = 0.2;
  Watchdog dog(timeout, [&](const std::string& m) { reports.Add(m); });
  std::atomic<bool> done{false};
  const auto watched = Clock::now();
  dog.Watch("recv from rank 3", [] { return Watchdog::Status{}; });
  dog.Watch("send to rank 1", [&] {
    return Watchdog::Status{done ? Watchdog::State::kDone : Watchdog::State::kPending, {}};
  });
  done = true;  // the second completes; only the first is stuck
  REQUIRE(Eventually([&] { return reports.size() == 1; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // no second report of the same operation
  REQUIRE(reports.size() == 1);
  CHECK(reports.messages[0] == "recv from rank 3 did not complete within 0.2 s");
  CHECK(std::chrono::duration<double>(reports.at[0] - watched).count() >= timeout);
  CHECK(dog.pending() == 0);
}

TEST_CASE("a failed operation is reported with its error", "[watchdog]") {
  Reports reports;
  Watchdog dog(60.0, [&](const std::string& m) { reports.Add(m); });
  dog.Watch("allgather", [] { return Watchdog::Status{Watchdog::State::kFailed, "unhandled system error"}; });
  REQUIRE(Eventually([&] { return reports.size() == 1; }));
  CHECK(reports.messages[0] == "allgather failed: unhandled system error");
}

TEST_CASE("the thread start hook runs on the watchdog's thread, and pending operations do not hold up the end",
          "[watchdog]") {
  std::atomic<bool> started{false};
  std::thread::id hook_thread;
  const auto begin = Clock::now();
  {
    Watchdog dog(
        3600.0, [](const std::string&) {},
        [&] {
          hook_thread = std::this_thread::get_id();
          started = true;
        });
    dog.Watch("broadcast from rank 0", [] { return Watchdog::Status{}; });
    REQUIRE(Eventually([&] { return started.load(); }));
    CHECK(dog.pending() == 1);
  }
  CHECK(hook_thread != std::this_thread::get_id());
  CHECK(std::chrono::duration<double>(Clock::now() - begin).count() < 5.0);
}
