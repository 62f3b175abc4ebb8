// JSON text to a document, for every reader of JSON files (datasets, safetensors headers, checkpoint manifests and
// sidecars, Hugging Face indexes). Malformed text, numbers out of range and nesting deeper than `max_depth` are
// refused with an Error naming `where`; the depth is checked while parsing, so a hostile file cannot build a
// document whose recursive destruction would exhaust the stack.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace cornstarch {

nlohmann::json ParseJson(std::string_view text, const std::string& where, int max_depth = 64);

}  // namespace cornstarch
