#include "cornstarch/train/step_logger.h"

#include <unistd.h>

#include <cstdio>

#include "cornstarch/base/logging.h"

namespace cornstarch {

namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

StepLogger::StepLogger(const Config& config, bool reports, int64_t resumed_at)
    : logging_(config.logging),
      total_steps_(config.train.steps),
      resumed_at_(resumed_at),
      reports_(reports),
      progress_line_(reports && isatty(STDERR_FILENO) && spdlog::get_level() <= spdlog::level::info),
      metrics_(reports ? config.logging.metrics_path : "", resumed_at),
      board_(reports ? config.logging.tensorboard_dir : ""),
      start_(std::chrono::steady_clock::now()) {}

void StepLogger::Log(const StepMetrics& m) {
  metrics_.Write(m);
  board_.Write(m);
  const bool last = m.step == total_steps_;
  if (reports_ && (m.step == 1 || m.step % logging_.interval == 0 || last)) {
    if (progress_line_) std::fprintf(stderr, "\r\033[K");  // clear the progress line the step line replaces
    spdlog::info(FormatStepLine(m, total_steps_));
  }
  if (progress_line_) {
    std::fprintf(stderr, "\r%s",
                 FormatProgress(m.step - resumed_at_, total_steps_ - resumed_at_, SecondsSince(start_), m.loss).c_str());
    if (last) std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
  }
}

void StepLogger::Finish(const std::vector<StepMetrics>& history) {
  if (!reports_ || history.empty()) return;
  spdlog::info("finished {} steps in {:.1f} s; loss {:.4f} -> {:.4f}", history.size(), SecondsSince(start_),
               history.front().loss, history.back().loss);
}

}  // namespace cornstarch
