#include "cornstarch/base/check.h"

namespace cornstarch::detail {

void CheckFailed(const char* file, int line, const char* cond, const std::string& msg) {
  std::string what = std::string(file) + ":" + std::to_string(line) + ": check `" + cond + "` failed";
  if (!msg.empty()) what += ": " + msg;
  throw std::logic_error(what);
}

}  // namespace cornstarch::detail
