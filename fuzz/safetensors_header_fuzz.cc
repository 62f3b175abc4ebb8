// The safetensors header parser (io/safetensors_header.h) on arbitrary file images: the length prefix, the JSON,
// dtypes, shapes and the offsets' tiling of the data buffer. Seeds: files written by WriteSafetensors.
#include "cornstarch/io/safetensors_header.h"
#include "fuzz/refuse_cleanly.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return cornstarch::fuzz::RefuseCleanly([&] { cornstarch::ParseSafetensorsHeader(data, size, "fuzz.safetensors"); });
}
