// A Hugging Face sharded checkpoint's index (model.safetensors.index.json): which shard file holds each tensor.
// Parsed from its text without LibTorch, so it is fuzzed on its own (fuzz/hf_index_fuzz.cc).
#pragma once

#include <map>
#include <string>

namespace cornstarch {

// Tensor name -> shard file (relative to the index's directory). Throws Error naming `path` for malformed JSON,
// a missing "weight_map" object, a file that is not a string, or a file outside the directory (absolute, or
// with a ".." component).
std::map<std::string, std::string> ParseHfIndex(const std::string& text, const std::string& path);

}  // namespace cornstarch
