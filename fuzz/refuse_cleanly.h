// What every fuzz target checks: a reader given arbitrary bytes either succeeds or refuses with cornstarch::Error
// (the clear, named error users see). Any other exception escapes to libFuzzer, which reports it like a crash, as
// do sanitizer findings (out-of-bounds access, overflow, leaks) and timeouts.
#pragma once

#include <spdlog/spdlog.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "cornstarch/base/check.h"

namespace cornstarch::fuzz {

template <class F>
int RefuseCleanly(F&& f) {
  static const bool quiet = [] {
    spdlog::set_level(spdlog::level::off);  // warnings about odd but accepted inputs would flood the output
    return true;
  }();
  (void)quiet;
  try {
    f();
  } catch (const Error&) {
  }
  return 0;
}

inline std::string Text(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

}  // namespace cornstarch::fuzz
