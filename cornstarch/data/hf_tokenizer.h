// Hugging Face `tokenizer.json`, read and applied natively: the BPE tokenizers of today's LLMs.
//
// Encoding follows the tokenizers library's pipeline: added tokens (special or not) are matched first, leftmost
// and longest, on the raw text; each stretch between them is normalised (NFC/NFD/NFKC/NFKD via ICU, Prepend,
// Replace, Sequence), pre-tokenised (Split on a regex, ByteLevel with GPT-2's byte-to-unicode map, Metaspace,
// Sequence) and each piece is turned into tokens by BPE: characters (or, with byte_fallback, <0xHH> pieces, or unk)
// merged pair by pair, lowest merge rank first and leftmost on ties; with ignore_merges a piece that is a token
// already is taken whole. Decoding runs the file's decoder chain (ByteLevel, Metaspace, Replace, ByteFallback,
// Fuse, Strip, Sequence). Regexes are PCRE2 in UTF + Unicode-property mode (the library uses Oniguruma; the
// patterns of Llama-3, GPT-4 and Qwen2 use nothing where the two differ), with match limits so a hostile pattern
// cannot hang a job. Any kind of normaliser, pre-tokeniser, model or decoder not listed here is an Error naming
// its JSON path. The post-processor is not applied (Encode adds no special tokens; chat templates do).
//
// BOS and EOS come from `tokenizer_config.json` beside the file when there is one (its bos_token / eos_token),
// otherwise from the usual names among the added tokens (<|begin_of_text|>, <s>; <|end_of_text|>, </s>,
// <|endoftext|>).
#pragma once

#include <memory>
#include <string>

#include "cornstarch/data/tokenizer.h"

namespace cornstarch {

class HfTokenizer : public Tokenizer {
 public:
  // Throws Error naming `path` (and the JSON path inside it) when it is missing, malformed or unsupported.
  static HfTokenizer FromFile(const std::string& path);
  // The same from the file's text; `config_text` is tokenizer_config.json's text or empty.
  static HfTokenizer FromJson(const std::string& text, const std::string& name, const std::string& config_text = "");

  HfTokenizer(HfTokenizer&&) noexcept;
  HfTokenizer& operator=(HfTokenizer&&) noexcept;
  ~HfTokenizer() override;

  using Tokenizer::Encode;
  std::vector<int64_t> Encode(const std::string& text, bool continues) const override;
  std::string Decode(const std::vector<int64_t>& ids) const override;
  int64_t vocab_size() const override;
  std::optional<int64_t> TokenId(const std::string& piece) const override;
  std::string Piece(int64_t id) const override;
  int64_t bos() const override;
  int64_t eos() const override;
  int64_t unk() const override;
  const std::string& name() const override;

 private:
  struct Impl;
  explicit HfTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;  // keeps PCRE2 and ICU out of this header
};

}  // namespace cornstarch
