// The command-line grammar every cornstarch tool shares: "--flag", "--flag VALUE" or "--flag=VALUE" (a flag may
// repeat), and positional arguments; "-h"/"--help" prints the tool's usage. Errors name the argument and say what
// was expected. Also the config every tool starts from: --config FILE, or the embedded configs/tiny.yaml, with the
// --set overrides on top.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "cornstarch/plan/config.h"

namespace cornstarch::tools {

struct Flag {
  std::string name;  // "--config"
  bool takes_value = false;
  std::function<void(const std::string& value)> apply;  // value is "" for a flag without one
};

// Applies `flags` in command-line order; anything not starting with '-' goes to `positional` (an error when it is
// null). "--help" prints `usage` and exits 0. Throws Error for an unknown flag or a missing value.
void ParseCommandLine(int argc, char** argv, const std::string& usage, const std::vector<Flag>& flags,
                      const std::function<void(const std::string&)>& positional = nullptr);

// `text` as an integer or a number for flag `flag`; Error("--ranks: expected an integer, got 'x'") otherwise.
int64_t ParseInteger(const std::string& flag, const std::string& text);
double ParseNumber(const std::string& flag, const std::string& text);

// The run configuration: `path` (LoadConfig), or the embedded configs/tiny.yaml when `path` is empty, with
// `overrides` applied.
Config LoadToolConfig(const std::string& path, const std::vector<std::string>& overrides);

// How LoadToolConfig names that config in errors and logs: `path`, or "<embedded configs/tiny.yaml>".
std::string ConfigSource(const std::string& path);

// Where a tool started by `bazel run` should resolve the user's relative paths: enters BUILD_WORKING_DIRECTORY
// when set (warning on stderr if it cannot).
void EnterUserDirectory();

}  // namespace cornstarch::tools
