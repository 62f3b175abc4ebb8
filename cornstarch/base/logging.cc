#include "cornstarch/base/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace cornstarch {

void InitLogging(int rank, const std::string& level) {
  spdlog::drop("cornstarch");  // re-initialisation (tests, tools) replaces the logger
  auto logger = spdlog::stderr_color_mt("cornstarch");
  logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [r" + std::to_string(rank) + "] [%^%l%$] %v");
  logger->set_level(spdlog::level::from_str(level));
  spdlog::set_default_logger(logger);
}

}  // namespace cornstarch
