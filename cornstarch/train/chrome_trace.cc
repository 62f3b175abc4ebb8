#include "cornstarch/train/chrome_trace.h"

namespace cornstarch {

void ChromeTrace::NameProcess(int pid, const std::string& name) {
  events_.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"args", {{"name", name}}}});
}

void ChromeTrace::NameThread(int pid, int tid, const std::string& name) {
  events_.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", {{"name", name}}}});
}

void ChromeTrace::Span(const std::string& name, const std::string& category, int pid, int tid, double start_us,
                       double duration_us, const nlohmann::json& args) {
  nlohmann::json e = {{"name", name}, {"ph", "X"}, {"pid", pid}, {"tid", tid}, {"ts", start_us}, {"dur", duration_us}};
  if (!category.empty()) e["cat"] = category;
  if (!args.is_null()) e["args"] = args;
  events_.push_back(std::move(e));
}

std::string ChromeTrace::Json() const {
  return nlohmann::json{{"traceEvents", events_}, {"displayTimeUnit", "ms"}}.dump() + "\n";
}

}  // namespace cornstarch
