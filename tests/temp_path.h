// Scratch paths for tests: under Bazel's per-test TEST_TMPDIR, or /tmp when a test binary is run by hand.
#pragma once

#include <cstdlib>
#include <string>

namespace cornstarch::testing {

inline std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

}  // namespace cornstarch::testing
