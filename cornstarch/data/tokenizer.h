// Text to token ids: what the chat templates and the tools need of a tokenizer, whatever its file type.
//
// Two file types are read natively: sentencepiece's `tokenizer.model` (data/sentencepiece_tokenizer.h, Llama-1/2
// style checkpoints) and Hugging Face's `tokenizer.json` (data/hf_tokenizer.h: byte-level BPE as Llama-3, Qwen2 and
// Mistral-Nemo ship it, and the Metaspace/byte-fallback form of Llama-2-derived files). OpenTokenizer picks by name.
//
// Encode never adds special tokens (no BOS, no post-processor template): the chat template places every special
// token itself, so the layout of a sample is decided in one place.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace cornstarch {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // `continues`: the text follows other tokens of the same sequence (a special token, a media placeholder), as a
  // stretch after an added token does in the tokenizers library, where Metaspace's prepend_scheme "first" then
  // adds no leading U+2581. Sentencepiece models treat every call alike.
  virtual std::vector<int64_t> Encode(const std::string& text, bool continues) const = 0;
  std::vector<int64_t> Encode(const std::string& text) const { return Encode(text, false); }
  virtual std::string Decode(const std::vector<int64_t>& ids) const = 0;
  // One past the largest id.
  virtual int64_t vocab_size() const = 0;
  // The id of a whole token given by its text (a special token such as "<|eot_id|>", a user-defined symbol);
  // nullopt when the vocabulary has no such token.
  virtual std::optional<int64_t> TokenId(const std::string& piece) const = 0;
  // The token's text as the vocabulary spells it (byte-level symbols, U+2581 spaces); "" for an unused id.
  virtual std::string Piece(int64_t id) const = 0;
  // Beginning/end of sequence and unknown: -1 when the tokenizer has none.
  virtual int64_t bos() const = 0;
  virtual int64_t eos() const = 0;
  virtual int64_t unk() const = 0;
  // The file it was read from, for error messages.
  virtual const std::string& name() const = 0;

  // The id placeholders are written with: the piece itself when the vocabulary has it, otherwise unk, otherwise 0.
  // Its embedding is overwritten by the encoder's features either way.
  int64_t PlaceholderId(const std::string& piece) const;
  // TokenId that must exist: throws Error naming the tokenizer and `why` it is needed.
  int64_t RequireToken(const std::string& piece, const std::string& why) const;
};

// The byte a byte-fallback piece "<0xHH>" stands for; -1 when the text is not of that form.
int ByteOfPiece(const std::string& text);
// Bytes of the UTF-8 character that starts with `lead`; 1 for a byte that cannot start one (a stray byte is a
// character of its own).
size_t Utf8Length(unsigned char lead);

// A `.json` file is read as a Hugging Face tokenizer.json, anything else as a sentencepiece model. Throws Error
// naming the file when it is missing or malformed.
std::unique_ptr<Tokenizer> OpenTokenizer(const std::string& path);

}  // namespace cornstarch
