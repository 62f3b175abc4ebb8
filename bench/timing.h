// Wall-clock timing shared by the benchmarks.
#pragma once

#include <chrono>
#include <functional>

namespace cornstarch::bench {

// Seconds `f` takes, on the steady clock.
inline double Seconds(const std::function<void()>& f) {
  const auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace cornstarch::bench
