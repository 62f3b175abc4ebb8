// Chrome-trace / Perfetto JSON (the "traceEvents" format): complete spans on (process, thread) tracks, and the
// tracks' names. One writer for the job's measured trace (train/trace.h) and cornstarch-plan's simulated timeline.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace cornstarch {

class ChromeTrace {
 public:
  void NameProcess(int pid, const std::string& name);
  void NameThread(int pid, int tid, const std::string& name);
  // A span from `start_us` lasting `duration_us` on track (pid, tid); an empty `category` is left out.
  void Span(const std::string& name, const std::string& category, int pid, int tid, double start_us,
            double duration_us, const nlohmann::json& args = nullptr);
  // The whole trace, timestamps in microseconds, shown in milliseconds.
  std::string Json() const;

 private:
  nlohmann::json events_ = nlohmann::json::array();
};

}  // namespace cornstarch
