#include "cornstarch/base/json.h"

#include "cornstarch/base/check.h"

namespace cornstarch {

nlohmann::json ParseJson(std::string_view text, const std::string& where, int max_depth) {
  const nlohmann::json::parser_callback_t limit = [&](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
    if (depth > max_depth) throw Error(where + ": JSON nested deeper than " + std::to_string(max_depth) + " levels");
    return true;
  };
  try {
    return nlohmann::json::parse(text.begin(), text.end(), limit);
  } catch (const nlohmann::json::exception& e) {
    throw Error(where + ": malformed JSON: " + e.what());
  }
}

}  // namespace cornstarch
