// The safetensors header (Hugging Face's format), parsed and validated from the file's bytes: an 8-byte little-
// endian header length N, N bytes of UTF-8 JSON {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin,
// end]}, ..., "__metadata__": {"key": "value"}} (padded with spaces), then the data buffer, which the offsets
// (relative to its start) must cover exactly, without holes or overlaps. Pure (no tensors, no files), so it is
// fuzzed on its own (fuzz/safetensors_header_fuzz.cc); io/safetensors.h reads and writes the tensors.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace cornstarch {

struct SafetensorsEntry {
  std::string dtype;  // "F32", "BF16", "I64", ...
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range within the data buffer
};

struct SafetensorsHeader {
  std::map<std::string, SafetensorsEntry> tensors;
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // file offset of the data buffer: 8 + header length
};

// The format's dtype names, in its specification's order.
const std::vector<std::string>& SafetensorsDtypes();
// Bytes per element of a dtype name; 0 when the format has no such dtype.
int SafetensorsDtypeBytes(const std::string& dtype);

// Validates a whole file image. Throws Error naming `path`, and the tensor where one is at fault: file shorter
// than 8 bytes, header length past the end or over the format's 100 MB, non-UTF-8 or malformed JSON, unknown
// dtype, bad shape, offsets out of bounds, overlapping, leaving holes, or not matching dtype x shape.
SafetensorsHeader ParseSafetensorsHeader(const uint8_t* data, uint64_t size, const std::string& path);

}  // namespace cornstarch
