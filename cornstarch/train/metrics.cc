#include "cornstarch/train/metrics.h"

#include <spdlog/fmt/fmt.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "cornstarch/base/check.h"

namespace cornstarch {

std::string FormatStepLine(const StepMetrics& m, int64_t total_steps) {
  std::string line = fmt::format(
      "step {:>{}}/{} | loss {:.4f} | lr {:.3e} | grad_norm {:.3f} | {:.0f} tok/s | {:.1f} ms | MFU {:.1f}% | "
      "mem {:.0f} MiB",
      m.step, std::to_string(total_steps).size(), total_steps, m.loss, m.lr, m.grad_norm, m.tokens_per_second(),
      m.step_seconds * 1e3, 100 * m.mfu, m.peak_memory_mib);
  if (m.eval_loss) line += fmt::format(" | eval_loss {:.4f} | eval_ppl {:.3f}", *m.eval_loss, m.eval_ppl());
  return line;
}

std::string FormatProgress(int64_t step, int64_t total_steps, double elapsed_seconds, double loss, int width) {
  const double done = total_steps > 0 ? static_cast<double>(step) / static_cast<double>(total_steps) : 1.0;
  const int filled = static_cast<int>(done * width);
  std::string bar(static_cast<size_t>(filled), '=');
  if (filled < width) bar += '>';
  bar.resize(static_cast<size_t>(width), ' ');
  const int64_t eta = step > 0 ? static_cast<int64_t>(elapsed_seconds / static_cast<double>(step) *
                                                      static_cast<double>(total_steps - step) + 0.5)
                               : 0;
  return fmt::format("[{}] {:>{}}/{} {:>3.0f}% | loss {:.4f} | ETA {}:{:02d}", bar, step,
                     std::to_string(total_steps).size(), total_steps, 100 * done, loss, eta / 60, eta % 60);
}

namespace {

constexpr const char* kCsvHeader =
    "step,loss,lr,grad_norm,tokens,step_seconds,tokens_per_second,flops,mfu,peak_memory_mib,eval_loss,eval_ppl";

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

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
  csv_ = EndsWith(path, ".csv");
  std::string kept = csv_ ? std::string(kCsvHeader) + "\n" : "";
  if (resumed_at > 0) {
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) {
      if (csv_) {
        const size_t comma = line.find(',');
        if (comma != std::string::npos && comma > 0 && line.find_first_not_of("0123456789") == comma &&
            std::stoll(line.substr(0, comma)) <= resumed_at) {
          kept += line + "\n";
        }
        continue;
      }
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
  if (csv_) {
    // Steps without an evaluation leave its two columns empty.
    const std::string eval = m.eval_loss ? fmt::format("{:.17g},{:.17g}", *m.eval_loss, m.eval_ppl()) : ",";
    out_ << fmt::format("{},{:.17g},{:.17g},{:.17g},{},{:.17g},{:.17g},{:.17g},{:.17g},{:.17g},{}\n", m.step, m.loss,
                        m.lr, m.grad_norm, m.tokens, m.step_seconds, m.tokens_per_second(), m.flops, m.mfu,
                        m.peak_memory_mib, eval)
         << std::flush;
    return;
  }
  nlohmann::json record = {
      {"step", m.step},     {"loss", m.loss},     {"lr", m.lr},
      {"grad_norm", m.grad_norm}, {"tokens", m.tokens}, {"step_seconds", m.step_seconds},
      {"tokens_per_second", m.tokens_per_second()},
      {"flops", m.flops},   {"mfu", m.mfu},       {"peak_memory_mib", m.peak_memory_mib},
  };
  if (m.eval_loss) record["eval_loss"] = *m.eval_loss, record["eval_ppl"] = m.eval_ppl();
  out_ << record.dump() << "\n" << std::flush;
}

}  // namespace cornstarch
