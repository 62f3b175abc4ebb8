// The safetensors format (Hugging Face), read and written exactly: an 8-byte little-endian header length N, N
// bytes of UTF-8 JSON {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
// "__metadata__": {"key": "value"}} (padded with spaces), then the data buffer, which the offsets (relative to
// its start) must cover exactly, without holes or overlaps. Little-endian data, C order.
//
// Reading maps the file and validates the whole header up front, so a bad file fails at open with the file and
// tensor named, never later as a crash. Writing goes to a temporary file that is fsynced and renamed into place.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
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

// Validates a whole file image (pure: no tensors). Throws Error naming `path`, and the tensor where one is at
// fault: file shorter than 8 bytes, header length past the end, non-UTF-8 or malformed JSON, unknown dtype, bad
// shape, offsets out of bounds, overlapping, leaving holes, or not matching dtype x shape.
SafetensorsHeader ParseSafetensorsHeader(const uint8_t* data, uint64_t size, const std::string& path);

class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const SafetensorsHeader& header() const { return header_; }
  bool contains(const std::string& name) const { return header_.tensors.count(name) > 0; }

  // A copy of the tensor (CPU); throws Error naming the file when it is absent.
  at::Tensor Get(const std::string& name) const;

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  SafetensorsHeader header_;
};

// Writes `tensors` (CPU or not; copied to contiguous CPU) in the given order, atomically.
void WriteSafetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Writes `bytes` to `path` atomically: a temporary file in the same directory, fsync, rename, fsync of the
// directory. Throws Error naming the path.
void WriteFileAtomically(const std::string& path, const std::string& bytes);

}  // namespace cornstarch
