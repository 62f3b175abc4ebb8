// Watches a communicator's operations in flight on a background thread, so that waiting for one needs no host
// polling: NCCL's Work::Wait only makes LibTorch's current stream wait on the device, and the host goes on queueing
// work. The watchdog is what still brings a job down when a peer never shows up: every operation handed to it is
// polled (NCCL: its completion event and the communicator's asynchronous error) until it completes, and one that
// fails or outlives the timeout is reported with its name through `on_stuck` (the communicator logs the rank and
// aborts the job there). Operations are independent: one completing out of order is simply dropped.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <list>
#include <mutex>
#include <string>
#include <thread>

namespace cornstarch {

class Watchdog {
 public:
  enum class State { kDone, kPending, kFailed };
  struct Status {
    State state = State::kPending;
    std::string error;  // kFailed: what failed
  };

  // `on_stuck(message)` runs on the watchdog's thread with "<op> failed: <error>" or "<op> did not complete within
  // <timeout> s"; it normally ends the process. `thread_start` runs first on that thread (e.g. cudaSetDevice).
  Watchdog(double timeout_seconds, std::function<void(const std::string&)> on_stuck,
           std::function<void()> thread_start = {});
  // Stops the thread; operations still pending are no longer watched.
  ~Watchdog();

  // Watches `op` from now on until `poll` says it is done or failed. `poll` runs on the watchdog's thread and must
  // not block.
  void Watch(std::string op, std::function<Status()> poll);
  // Operations still pending.
  size_t pending() const;

 private:
  struct Entry {
    std::string op;
    std::function<Status()> poll;
    std::chrono::steady_clock::time_point deadline;
  };
  void Loop(const std::function<void()>& thread_start);

  const double timeout_;
  const std::function<void(const std::string&)> on_stuck_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::list<Entry> entries_;
  bool stop_ = false;
  std::thread thread_;  // last: starts once everything above exists
};

}  // namespace cornstarch
