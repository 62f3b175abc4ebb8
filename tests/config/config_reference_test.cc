#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>
#include <yaml-cpp/yaml.h>

#include "cornstarch/plan/config.h"

using namespace cornstarch;

namespace {

// Every leaf key path of a YAML document; encoder names are replaced by <name>.
void Leaves(const YAML::Node& node, const std::string& path, std::vector<std::string>& out) {
  if (!node.IsMap()) {
    out.push_back(path);
    return;
  }
  for (const auto& entry : node) {
    std::string key = entry.first.Scalar();
    if (path == "model.encoders") key = "<name>";
    Leaves(entry.second, path.empty() ? key : path + "." + key, out);
  }
}

}  // namespace

TEST_CASE("docs/configuration.md is the generated reference, so it cannot drift from the structs", "[config][docs]") {
  std::ifstream in("docs/configuration.md");
  REQUIRE(in);
  std::stringstream text;
  text << in.rdbuf();
  INFO("regenerate with: bazel run //tools:cornstarch-train -- --config-reference > docs/configuration.md");
  CHECK(text.str() == ConfigReference());
}

TEST_CASE("the reference documents every field the parser reads, each with a description", "[config][docs]") {
  const std::string reference = ConfigReference();
  // A config with one encoder of each type: ToYaml writes every field that exists.
  const Config c = ParseConfig("model:\n  encoders:\n    vision: {type: vision}\n    audio: {type: audio}\n", "t.yaml");
  std::vector<std::string> keys;
  Leaves(YAML::Load(ToYaml(c)), "", keys);
  CHECK(keys.size() > 40);
  for (const std::string& key : keys) {
    INFO(key);
    const size_t at = reference.find("| `" + key + "` |");
    REQUIRE(at != std::string::npos);
    const std::string row = reference.substr(at, reference.find('\n', at) - at);
    CHECK(row.size() > key.size() + 30);  // type, default and a sentence
    CHECK(row.substr(row.size() - 3) != "|  |");
  }
}
