#include "cornstarch/io/safetensors_header.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <utility>

#include "cornstarch/base/check.h"
#include "cornstarch/base/json.h"

namespace cornstarch {

namespace {

// The format's own limit on the header, which also bounds what a corrupt length can make us parse.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct Dtype {
  const char* name;
  int bytes;
};

constexpr Dtype kDtypes[] = {{"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
                             {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
                             {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8}};

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

const std::vector<std::string>& SafetensorsDtypes() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const Dtype& d : kDtypes) v.push_back(d.name);
    return v;
  }();
  return names;
}

int SafetensorsDtypeBytes(const std::string& dtype) {
  for (const Dtype& d : kDtypes) {
    if (dtype == d.name) return d.bytes;
  }
  return 0;
}

SafetensorsHeader ParseSafetensorsHeader(const uint8_t* data, uint64_t size, const std::string& path) {
  if (size < 8) {
    throw Error(path + ": not a safetensors file: " + std::to_string(size) + " bytes, less than the 8-byte header "
                "length");
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | data[i];
  if (n > size - 8) {
    throw Error(path + ": header length " + std::to_string(n) + " runs past the end of the file (" +
                std::to_string(size) + " bytes); the file is truncated or not safetensors");
  }
  if (n > kMaxHeaderBytes) throw Error(path + ": header length " + std::to_string(n) + " exceeds the format's 100 MB");
  const nlohmann::json j = ParseJson(std::string_view(reinterpret_cast<const char*>(data) + 8, n), path + " header");
  if (!j.is_object()) throw Error(path + ": the header must be a JSON object");
  SafetensorsHeader h;
  h.data_start = 8 + n;
  const uint64_t buffer = size - h.data_start;
  for (const auto& [name, v] : j.items()) {
    const std::string where = path + ": tensor '" + name + "'";
    if (name == "__metadata__") {
      if (!v.is_object()) throw Error(path + ": __metadata__ must map strings to strings");
      for (const auto& [k, mv] : v.items()) {
        if (!mv.is_string()) throw Error(path + ": __metadata__ value of '" + k + "' must be a string");
        h.metadata[k] = mv.get<std::string>();
      }
      continue;
    }
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets")) {
      throw Error(where + ": expected an object with dtype, shape and data_offsets");
    }
    SafetensorsEntry e;
    if (!v["dtype"].is_string()) throw Error(where + ": dtype must be a string");
    e.dtype = v["dtype"].get<std::string>();
    const int bytes = SafetensorsDtypeBytes(e.dtype);
    if (bytes == 0) throw Error(where + ": unknown dtype '" + e.dtype + "'");
    if (!v["shape"].is_array()) throw Error(where + ": shape must be an array of non-negative integers");
    uint64_t numel = 1;
    for (const auto& d : v["shape"]) {
      if (!d.is_number_unsigned()) throw Error(where + ": shape must be an array of non-negative integers");
      const uint64_t dim = d.get<uint64_t>();
      if (dim != 0 && numel > (uint64_t{1} << 62) / dim) throw Error(where + ": shape overflows");
      numel *= dim;
      e.shape.push_back(static_cast<int64_t>(dim));
    }
    const auto& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
      throw Error(where + ": data_offsets must be [begin, end] with non-negative integers");
    }
    e.begin = off[0].get<uint64_t>();
    e.end = off[1].get<uint64_t>();
    const std::string range = "[" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "]";
    if (e.begin > e.end) throw Error(where + ": data_offsets " + range + " end before they begin");
    if (e.end > buffer) {
      throw Error(where + ": data_offsets " + range + " run past the end of the data (" + std::to_string(buffer) +
                  " bytes); the file is truncated");
    }
    if (e.end - e.begin != numel * static_cast<uint64_t>(bytes)) {
      throw Error(where + ": data_offsets " + range + " hold " + std::to_string(e.end - e.begin) + " bytes, but " +
                  e.dtype + " " + ShapeString(e.shape) + " needs " + std::to_string(numel * bytes));
    }
    h.tensors[name] = e;
  }
  // The offsets must tile the buffer exactly: no overlaps, no holes, nothing after the last tensor.
  std::vector<std::pair<const std::string*, const SafetensorsEntry*>> order;
  for (const auto& [name, e] : h.tensors) order.emplace_back(&name, &e);
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return a.second->begin != b.second->begin ? a.second->begin < b.second->begin : a.second->end < b.second->end;
  });
  uint64_t at = 0;
  const std::string* previous = nullptr;
  for (const auto& [name, e] : order) {
    if (e->begin < at) throw Error(path + ": tensors '" + *previous + "' and '" + *name + "' overlap");
    if (e->begin > at) {
      throw Error(path + ": bytes [" + std::to_string(at) + ", " + std::to_string(e->begin) +
                  ") of the data belong to no tensor (before '" + *name + "')");
    }
    at = e->end;
    previous = name;
  }
  if (at != buffer) {
    throw Error(path + ": the last " + std::to_string(buffer - at) + " bytes of the data belong to no tensor");
  }
  return h;
}

}  // namespace cornstarch
