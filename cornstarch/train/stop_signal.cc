#include "cornstarch/train/stop_signal.h"

#include <unistd.h>

#include <atomic>
#include <csignal>

namespace cornstarch {

namespace {

std::atomic<int> first_signal{0};

void OnStopSignal(int signal) {
  int none = 0;
  if (first_signal.compare_exchange_strong(none, signal)) return;
  // A second signal: the user (or the scheduler) will not wait for the step to finish.
  constexpr char kMessage[] = "cornstarch: second stop signal, exiting now without a checkpoint\n";
  (void)!write(STDERR_FILENO, kMessage, sizeof kMessage - 1);
  _exit(128 + signal);
}

}  // namespace

void InstallStopSignals() {
  struct sigaction action = {};
  action.sa_handler = OnStopSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // blocking calls (MPI, file I/O) carry on; the loop checks between steps
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGUSR1, &action, nullptr);
}

int StopSignal() { return first_signal.load(); }

const char* SignalName(int signal) {
  switch (signal) {
    case SIGTERM: return "SIGTERM";
    case SIGUSR1: return "SIGUSR1";
  }
  return "a signal";
}

}  // namespace cornstarch
