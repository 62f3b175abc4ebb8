#include "cornstarch/io/hf_index.h"

#include <sstream>

#include "cornstarch/base/check.h"
#include "cornstarch/base/json.h"

namespace cornstarch {

namespace {

bool InsideDirectory(const std::string& file) {
  if (file.empty() || file.front() == '/' || file.find('\0') != std::string::npos) return false;
  std::istringstream parts(file);
  for (std::string part; std::getline(parts, part, '/');) {
    if (part == "..") return false;
  }
  return true;
}

}  // namespace

std::map<std::string, std::string> ParseHfIndex(const std::string& text, const std::string& path) {
  const nlohmann::json j = ParseJson(text, path);
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
    throw Error(path + ": malformed index: expected an object with a \"weight_map\" object");
  }
  std::map<std::string, std::string> shard_of;
  for (const auto& [name, file] : j["weight_map"].items()) {
    if (!file.is_string() || !InsideDirectory(file.get<std::string>())) {
      throw Error(path + ": malformed index: the file of '" + name + "' must be a path inside the directory");
    }
    shard_of[name] = file.get<std::string>();
  }
  return shard_of;
}

}  // namespace cornstarch
