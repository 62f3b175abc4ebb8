// Wall-clock timing and command-line flags shared by the benchmarks.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace cornstarch::bench {

// Seconds `f` takes, on the steady clock.
inline double Seconds(const std::function<void()>& f) {
  const auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The median of `v` (the upper one of an even count); 0 when empty.
inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// The value N of `name N` on the command line, or `fallback` when absent.
inline int IntFlag(int argc, char** argv, const std::string& name, int fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (argv[i] == name) return std::stoi(argv[i + 1]);
  }
  return fallback;
}

}  // namespace cornstarch::bench
