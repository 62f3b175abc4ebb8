#include "cornstarch/train/checkpoint_manifest.h"

#include <charconv>

#include "cornstarch/base/check.h"
#include "cornstarch/base/json.h"

namespace cornstarch {

namespace {

// A name that stays inside the checkpoint directory when joined to it.
bool PlainName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

template <class F>
auto Fields(const std::string& path, F&& f) {
  try {
    return f();
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": missing or mistyped field: " + e.what());
  }
}

}  // namespace

CheckpointManifest ParseCheckpointManifest(const std::string& text, const std::string& path) {
  const nlohmann::json m = ParseJson(text, path);
  return Fields(path, [&] {
    if (!m.is_object() || m.at("format") != kCheckpointFormat || m.at("version") != kCheckpointVersion) {
      throw Error(path + ": not a version " + std::to_string(kCheckpointVersion) + " cornstarch checkpoint");
    }
    CheckpointManifest c;
    c.step = m.at("step").get<int64_t>();
    c.optimizer_step = m.at("optimizer_step").get<int64_t>();
    c.samples_consumed = m.at("samples_consumed").get<int64_t>();
    c.seed = m.at("train").at("seed").get<int64_t>();
    c.global_batch_size = m.at("train").at("global_batch_size").get<int64_t>();
    if (c.step < 0 || c.optimizer_step < 0 || c.global_batch_size <= 0) {
      throw Error(path + ": step and optimizer_step must be >= 0 and train.global_batch_size > 0");
    }
    int64_t samples = 0;
    if (__builtin_mul_overflow(c.step, c.global_batch_size, &samples) || samples != c.samples_consumed) {
      throw Error(path + ": samples_consumed does not match step x global_batch_size");
    }
    for (const nlohmann::json& s : m.at("shards")) {
      c.shards.push_back(s.get<std::string>());
      if (!PlainName(c.shards.back() + ".json")) {
        throw Error(path + ": shard '" + c.shards.back() + "' is not a file name");
      }
    }
    return c;
  });
}

ShardSidecar ParseShardSidecar(const std::string& text, const std::string& path) {
  const nlohmann::json s = ParseJson(text, path);
  return Fields(path, [&] {
    ShardSidecar c;
    c.file = s.at("file").get<std::string>();
    if (!PlainName(c.file)) throw Error(path + ": shard file '" + c.file + "' is not a file name");
    c.bytes = s.at("bytes").get<uint64_t>();
    c.checksum = s.at("fnv1a64").get<std::string>();
    for (const nlohmann::json& t : s.at("tensors")) c.tensors.push_back(t.get<std::string>());
    return c;
  });
}

std::optional<TensorPiece> ParsePieceName(const std::string& name) {
  const size_t open = name.rfind('['), colon = name.rfind(':');
  if (name.empty() || name.back() != ']' || open == std::string::npos || open == 0 || colon == std::string::npos ||
      colon < open) {
    return std::nullopt;
  }
  TensorPiece p{name.substr(0, open)};
  auto number = [&](size_t from, size_t to, int64_t& out) {
    const char* first = name.data() + from;
    const char* last = name.data() + to;
    const auto [end, ec] = std::from_chars(first, last, out);
    return first != last && *first != '-' && ec == std::errc() && end == last;
  };
  if (!number(open + 1, colon, p.begin) || !number(colon + 1, name.size() - 1, p.end)) return std::nullopt;
  if (p.begin > p.end) throw Error("tensor piece '" + name + "': the range ends before it begins");
  return p;
}

}  // namespace cornstarch
