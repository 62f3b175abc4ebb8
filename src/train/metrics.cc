#include "cornstarch/train/metrics.h"

#include <spdlog/fmt/fmt.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "cornstarch/util/check.h"

namespace cornstarch {

std::string FormatStepLine(const StepMetrics& m, int64_t total_steps) {
  return fmt::format(
      "step {:>{}}/{} | loss {:.4f} | lr {:.3e} | grad_norm {:.3f} | {:.0f} tok/s | {:.1f} ms | MFU {:.1f}% | "
      "mem {:.0f} MiB",
      m.step, std::to_string(total_steps).size(), total_steps, m.loss, m.lr, m.grad_norm, m.tokens_per_second(),
      m.step_seconds * 1e3, 100 * m.mfu, m.peak_memory_mib);
}

double PeakResidentMiB() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  }
  return 0.0;
}

MetricsWriter::MetricsWriter(const std::string& path, int64_t resumed_at) {
  if (path.empty()) return;
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  std::string kept;
  if (resumed_at > 0) {
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) {
      const nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (record.is_object() && record.value("step", int64_t{0}) <= resumed_at) kept += line + "\n";
    }
  }
  out_.open(path, std::ios::trunc);
  if (!out_) throw Error("logging.metrics_path: cannot write '" + path + "'");
  out_ << kept << std::flush;
}

void MetricsWriter::Write(const StepMetrics& m) {
  if (!out_.is_open()) return;
  const nlohmann::json record = {
      {"step", m.step},     {"loss", m.loss},     {"lr", m.lr},
      {"grad_norm", m.grad_norm}, {"tokens", m.tokens}, {"step_seconds", m.step_seconds},
      {"tokens_per_second", m.tokens_per_second()},
      {"flops", m.flops},   {"mfu", m.mfu},       {"peak_memory_mib", m.peak_memory_mib},
  };
  out_ << record.dump() << "\n" << std::flush;
}

}  // namespace cornstarch
