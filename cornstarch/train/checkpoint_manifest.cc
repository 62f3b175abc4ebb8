#include "cornstarch/train/checkpoint_manifest.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <iterator>
#include <type_traits>
#include <utility>

#include "cornstarch/base/check.h"
#include "cornstarch/base/json.h"

namespace cornstarch {

namespace {

// A name that stays inside the checkpoint directory when joined to it.
bool PlainName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

// Field `key` of `j` as an integer of type T. nlohmann's get<T>() casts a floating-point JSON number (1e30, or an
// integer literal past 64 bits, which it parses as a double) without a range check, which is undefined behaviour:
// only an integer literal that fits T is taken.
template <class T>
T IntegerAt(const nlohmann::json& j, const char* key, const std::string& path) {
  const nlohmann::json& v = j.at(key);
  const bool fits = std::is_unsigned_v<T> ? v.is_number_unsigned()
                                          : v.is_number_integer() && (!v.is_number_unsigned() ||
                                                                      v.get<uint64_t>() <= INT64_MAX);
  if (!fits) throw Error(path + ": missing or mistyped field: " + key + " must be an integer, got " + v.dump());
  return v.get<T>();
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
    c.step = IntegerAt<int64_t>(m, "step", path);
    c.optimizer_step = IntegerAt<int64_t>(m, "optimizer_step", path);
    c.samples_consumed = IntegerAt<int64_t>(m, "samples_consumed", path);
    c.seed = IntegerAt<int64_t>(m.at("train"), "seed", path);
    c.global_batch_size = IntegerAt<int64_t>(m.at("train"), "global_batch_size", path);
    if (c.step < 0 || c.optimizer_step < 0 || c.global_batch_size <= 0) {
      throw Error(path + ": step and optimizer_step must be >= 0 and train.global_batch_size > 0");
    }
    int64_t samples = 0;
    if (__builtin_mul_overflow(c.step, c.global_batch_size, &samples) || samples != c.samples_consumed) {
      throw Error(path + ": samples_consumed does not match step x global_batch_size");
    }
    if (m.contains("data_streams")) {
      const nlohmann::json& streams = m.at("data_streams");
      if (!streams.is_array()) throw Error(path + ": data_streams must be a list of lists of integers");
      for (const nlohmann::json& stream : streams) {
        if (!stream.is_array()) throw Error(path + ": data_streams must be a list of lists of integers");
        std::vector<int64_t> cursor;
        for (const nlohmann::json& v : stream) {
          if (!v.is_number_integer() || (v.is_number_unsigned() ? v.get<uint64_t>() > INT64_MAX : v.get<int64_t>() < 0)) {
            throw Error(path + ": data_streams must hold lists of non-negative integers, got " + v.dump());
          }
          cursor.push_back(v.get<int64_t>());
        }
        if (!c.data_streams.empty() && cursor.size() != c.data_streams[0].size()) {
          throw Error(path + ": data_streams: every stream's cursor must have the same length");
        }
        c.data_streams.push_back(std::move(cursor));
      }
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
    c.bytes = IntegerAt<uint64_t>(s, "bytes", path);
    c.checksum = s.at("fnv1a64").get<std::string>();
    for (const nlohmann::json& t : s.at("tensors")) c.tensors.push_back(t.get<std::string>());
    return c;
  });
}

namespace {

// Characters [from, to) of `text` as a non-negative integer that fits T: all of them digits, at least one.
template <class T>
bool Count(const std::string& text, size_t from, size_t to, T& out) {
  const char* first = text.data() + from;
  const char* last = text.data() + to;
  const auto [end, ec] = std::from_chars(first, last, out);
  return first != last && *first != '-' && ec == std::errc() && end == last;
}

// A tp slice name's cuts.
constexpr std::pair<TpSplit, const char*> kCuts[] = {{TpSplit::kDim0, "dim0"}, {TpSplit::kDim1, "dim1"},
                                                     {TpSplit::kQkv, "qkv"}};

}  // namespace

std::optional<TensorPiece> ParsePieceName(const std::string& name) {
  const size_t open = name.rfind('['), colon = name.rfind(':');
  if (name.empty() || name.back() != ']' || open == std::string::npos || open == 0 || colon == std::string::npos ||
      colon < open) {
    return std::nullopt;
  }
  TensorPiece p{name.substr(0, open)};
  if (!Count(name, open + 1, colon, p.begin) || !Count(name, colon + 1, name.size() - 1, p.end)) return std::nullopt;
  if (p.begin > p.end) throw Error("tensor piece '" + name + "': the range ends before it begins");
  return p;
}

std::string FormatTpSliceName(const TpSliceName& slice) {
  for (const auto& [split, cut] : kCuts) {
    if (split == slice.split) {
      return slice.tensor + "@tp" + std::to_string(slice.rank) + "/" + std::to_string(slice.size) + ":" + cut;
    }
  }
  throw Error("tensor '" + slice.tensor + "': a whole tensor has no tp slice name");
}

std::optional<TpSliceName> ParseTpSliceName(const std::string& name) {
  const size_t at = name.rfind("@tp");
  if (at == std::string::npos || at == 0) return std::nullopt;
  const size_t slash = name.find('/', at), colon = name.find(':', at);
  if (slash == std::string::npos || colon == std::string::npos || colon < slash) return std::nullopt;
  TpSliceName s{name.substr(0, at)};
  if (!Count(name, at + 3, slash, s.rank) || !Count(name, slash + 1, colon, s.size)) return std::nullopt;
  const std::string cut = name.substr(colon + 1);
  const auto* known = std::find_if(std::begin(kCuts), std::end(kCuts), [&](const auto& c) { return cut == c.second; });
  if (known == std::end(kCuts)) {
    throw Error("tensor slice '" + name + "': cut '" + cut + "' is none of dim0, dim1, qkv");
  }
  if (s.rank >= s.size) throw Error("tensor slice '" + name + "': tp rank " + std::to_string(s.rank) + " of " +
                                    std::to_string(s.size));
  s.split = known->first;
  return s;
}

}  // namespace cornstarch
