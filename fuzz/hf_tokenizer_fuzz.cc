// The tokenizer.json reader (data/hf_tokenizer.h: JSON, regex patterns, normalisers, BPE, decoders) on arbitrary
// text, and a tokenizer that loads encoding and decoding text with special tokens, whitespace runs, non-ASCII,
// invalid UTF-8 and a long word. Seeds: the tokenizer.json fixtures of tests/data/testdata/tokenizers.
#include "cornstarch/data/hf_tokenizer.h"
#include "fuzz/refuse_cleanly.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return cornstarch::fuzz::RefuseCleanly([&] {
    using cornstarch::HfTokenizer;
    const HfTokenizer t = HfTokenizer::FromJson(cornstarch::fuzz::Text(data, size), "fuzz.json");
    const std::string text = "<s>  Hello <|im_start|>w\xc3\xb6rld\t\n\n 123456 \xe4\xb8\xad\xe6\x96\x87 \xff\xc3 " +
                             std::string(300, 'a') + "</s>";
    t.Decode(t.Encode(text));
    t.Decode(t.Encode(text, true));
    t.PlaceholderId("<image>");
  });
}
