#include "cornstarch/data/tokenizer.h"

#include "cornstarch/base/check.h"
#include "cornstarch/data/hf_tokenizer.h"
#include "cornstarch/data/sentencepiece_tokenizer.h"

namespace cornstarch {

int64_t Tokenizer::PlaceholderId(const std::string& piece) const {
  if (const std::optional<int64_t> id = TokenId(piece)) return *id;
  return unk() >= 0 ? unk() : 0;
}

int64_t Tokenizer::RequireToken(const std::string& piece, const std::string& why) const {
  if (const std::optional<int64_t> id = TokenId(piece)) return *id;
  throw Error(name() + ": the tokenizer has no token '" + piece + "', which " + why + " needs");
}

int ByteOfPiece(const std::string& text) {
  if (text.size() != 6 || text.compare(0, 3, "<0x") != 0 || text[5] != '>') return -1;
  int value = 0;
  for (char c : text.substr(3, 2)) {
    const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10
                      : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value;
}

size_t Utf8Length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xe) return 3;
  if ((lead >> 3) == 0x1e) return 4;
  return 1;
}

std::unique_ptr<Tokenizer> OpenTokenizer(const std::string& path) {
  const bool json = path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0;
  if (json) return std::make_unique<HfTokenizer>(HfTokenizer::FromFile(path));
  return std::make_unique<SentencePieceTokenizer>(path);
}

}  // namespace cornstarch
