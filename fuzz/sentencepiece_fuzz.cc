// The sentencepiece model reader (data/sentencepiece_tokenizer.h, a protobuf decoder written here) on arbitrary
// bytes, and a model that loads encoding and decoding text with spaces, a user symbol, non-ASCII and bytes outside any piece.
// Seeds: tokenizers trained by tools/make-demo-data.
#include "cornstarch/data/sentencepiece_tokenizer.h"
#include "fuzz/refuse_cleanly.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return cornstarch::fuzz::RefuseCleanly([&] {
    using cornstarch::SentencePieceTokenizer;
    const SentencePieceTokenizer t = SentencePieceTokenizer::FromBytes(cornstarch::fuzz::Text(data, size), "fuzz.model");
    const std::vector<int64_t> ids = t.Encode("  Hello <image> w\xc3\xb6rld\t\x01\xff ASSISTANT:  ");
    t.Decode(ids);
    t.PlaceholderId("<image>");
  });
}
