// The Hugging Face sharded-checkpoint index reader (io/hf_index.h) on arbitrary text. Seeds: an index written by
// WriteHfIndex over shards written by the project.
#include "cornstarch/io/hf_index.h"
#include "fuzz/refuse_cleanly.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return cornstarch::fuzz::RefuseCleanly(
      [&] { cornstarch::ParseHfIndex(cornstarch::fuzz::Text(data, size), "model.safetensors.index.json"); });
}
