#include "cornstarch/dist/watchdog.h"

#include <sstream>

namespace cornstarch {

namespace {
// How often pending operations are polled: short next to any collective worth overlapping, long enough that the
// thread costs nothing measurable.
constexpr std::chrono::microseconds kPollInterval(200);
}  // namespace

Watchdog::Watchdog(double timeout_seconds, std::function<void(const std::string&)> on_stuck,
                   std::function<void()> thread_start)
    : timeout_(timeout_seconds),
      on_stuck_(std::move(on_stuck)),
      thread_([this, start = std::move(thread_start)] { Loop(start); }) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void Watchdog::Watch(std::string op, std::function<Status()> poll) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(timeout_));
  {
    std::lock_guard<std::mutex> lock(mu_);
    entries_.push_back({std::move(op), std::move(poll), deadline});
  }
  wake_.notify_all();
}

size_t Watchdog::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

void Watchdog::Loop(const std::function<void()>& thread_start) {
  if (thread_start) thread_start();
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    wake_.wait(lock, [&] { return stop_ || !entries_.empty(); });
    if (stop_) return;
    // Polled under the lock: Watch only appends, and a poll is one non-blocking query.
    for (auto it = entries_.begin(); it != entries_.end();) {
      const Status status = it->poll();
      std::string report;
      if (status.state == State::kFailed) {
        report = it->op + " failed: " + status.error;
      } else if (status.state == State::kPending && std::chrono::steady_clock::now() > it->deadline) {
        std::ostringstream s;
        s << it->op << " did not complete within " << timeout_ << " s";
        report = s.str();
      }
      if (status.state == State::kPending && report.empty()) {
        ++it;
        continue;
      }
      it = entries_.erase(it);
      if (!report.empty()) {
        lock.unlock();
        on_stuck_(report);
        lock.lock();
      }
    }
    wake_.wait_for(lock, kPollInterval, [&] { return stop_; });
  }
}

}  // namespace cornstarch
