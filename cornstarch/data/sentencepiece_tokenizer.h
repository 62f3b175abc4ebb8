// Text to token ids with a sentencepiece BPE model (the tokenizer.model of Llama-style checkpoints), read and
// applied natively. Debian's libsentencepiece bundles its own copy of protobuf, which clashes with LibTorch's in
// one process; the model file is a small protobuf message, and BPE encoding is a few dozen lines.
//
// Encoding follows sentencepiece: whitespace normalisation (extra spaces removed, a dummy-prefix space, spaces
// escaped as U+2581), user-defined symbols kept whole, then repeatedly merging the adjacent pair whose union is
// the highest-scoring piece (leftmost on ties), unknown pieces as bytes when the model has byte fallback or as
// one unk per run otherwise. The Unicode normalisation table some models carry (nmt_nfkc) is not applied: a
// warning says so once; Llama's models use none.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "cornstarch/data/tokenizer.h"

namespace cornstarch {

class SentencePieceTokenizer : public Tokenizer {
 public:
  // Throws Error naming `model_path` when it is missing, not a sentencepiece model, or not a BPE model.
  explicit SentencePieceTokenizer(const std::string& model_path);
  // The same from the model file's bytes; `name` names it in errors.
  static SentencePieceTokenizer FromBytes(const std::string& bytes, const std::string& name);

  using Tokenizer::Encode;
  std::vector<int64_t> Encode(const std::string& text, bool continues) const override;
  std::string Decode(const std::vector<int64_t>& ids) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(pieces_.size()); }
  std::optional<int64_t> TokenId(const std::string& piece) const override;
  std::string Piece(int64_t id) const override;
  int64_t bos() const override { return bos_; }
  int64_t eos() const override { return eos_; }
  int64_t unk() const override { return unk_; }
  const std::string& name() const override { return name_; }

 private:
  SentencePieceTokenizer() = default;
  void Load(const std::string& bytes, const std::string& name);

  enum class Type : int { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };
  struct Entry {
    std::string text;
    float score = 0;
    Type type = Type::kNormal;
  };
  std::string Normalize(const std::string& text) const;
  int64_t Find(const std::string& piece) const;  // -1 if absent

  std::vector<Entry> pieces_;
  std::unordered_map<std::string, int64_t> ids_;  // normal, user-defined and unused pieces
  std::vector<std::string> user_symbols_;         // longest first
  int64_t byte_ids_[256];
  bool byte_fallback_ = false;
  bool add_dummy_prefix_ = true, remove_extra_whitespaces_ = true, escape_whitespaces_ = true;
  int64_t unk_ = 0, bos_ = 1, eos_ = 2;
  std::string name_;
};

}  // namespace cornstarch
