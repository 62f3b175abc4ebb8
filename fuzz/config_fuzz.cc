// The YAML config mapping (plan/config.h: parsing, typed fields, choices, validation) on arbitrary text. Seeds:
// the configs under configs/.
#include "cornstarch/plan/config.h"
#include "fuzz/refuse_cleanly.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return cornstarch::fuzz::RefuseCleanly(
      [&] { cornstarch::ParseConfig(cornstarch::fuzz::Text(data, size), "fuzz.yaml"); });
}
