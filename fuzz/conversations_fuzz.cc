// The LLaVA-style conversation reader (data/conversation.h) on arbitrary text, as a .json array or as .jsonl
// lines (the first byte picks). Seeds: datasets written by tools/make-demo-data.
#include "cornstarch/data/conversation.h"
#include "fuzz/refuse_cleanly.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  return cornstarch::fuzz::RefuseCleanly([&] {
    cornstarch::ParseConversations(cornstarch::fuzz::Text(data + 1, size - 1), data[0] & 1 ? "f.jsonl" : "f.json");
  });
}
