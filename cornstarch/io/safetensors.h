// Safetensors files (Hugging Face's format, io/safetensors_header.h), read and written exactly: little-endian
// data, C order.
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

#include "cornstarch/io/safetensors_header.h"

namespace cornstarch {

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
  // A copy of elements [begin, begin + length) along dim `dim` (0 or 1), the other dims whole: a tensor-parallel
  // rank's slice, read without touching the rest of the tensor's bytes.
  at::Tensor GetSlice(const std::string& name, int dim, int64_t begin, int64_t length) const;

 private:
  const SafetensorsEntry& Entry(const std::string& name, at::ScalarType* type) const;

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
