// The message of the cornstarch::Error that `f` throws, or "no error": lets tests compare whole error texts.
#pragma once

#include <functional>
#include <string>

#include "cornstarch/base/check.h"

namespace cornstarch::testing {

inline std::string ErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace cornstarch::testing
