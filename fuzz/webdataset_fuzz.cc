// The WebDataset shard reader (data/webdataset.h: tar headers, long-name records, grouping by key) on arbitrary
// bytes. Seeds: shards written by the project's tar writer in make_corpus (ustar, GNU long names, pax records).
#include <sstream>

#include "cornstarch/data/webdataset.h"
#include "fuzz/refuse_cleanly.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return cornstarch::fuzz::RefuseCleanly([&] {
    std::istringstream in(cornstarch::fuzz::Text(data, size));
    cornstarch::GroupWebDataset(cornstarch::ReadTarIndex(in, "fuzz.tar"));
  });
}
