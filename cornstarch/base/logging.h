// One rank-aware logger for the whole process. Every line carries the rank ("[r3]"), so merged job logs stay
// readable; per-step lines are printed by one rank only (see IsLoggingRank).
#pragma once

#include <spdlog/spdlog.h>

#include <string>

namespace cornstarch {

// Installs the default spdlog logger with pattern "[time] [rK] [level] msg". `level` is one of
// trace|debug|info|warn|error (validated by the config).
void InitLogging(int rank, const std::string& level);

}  // namespace cornstarch
