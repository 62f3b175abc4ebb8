#include "cornstarch/data/sentencepiece_tokenizer.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <queue>

#include "cornstarch/base/check.h"

namespace cornstarch {

namespace {

const std::string kSpace = "\xe2\x96\x81";  // U+2581, sentencepiece's visible space

// The protobuf wire format, as much of it as a ModelProto needs.
class Wire {
 public:
  Wire(const char* p, size_t n, const std::string& file) : p_(p), end_(p + n), file_(file) {}
  bool done() const { return p_ >= end_; }
  uint64_t Varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      Need(1);
      const uint8_t b = static_cast<uint8_t>(*p_++);
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    Fail();
  }
  // (field number, wire type)
  std::pair<uint32_t, int> Tag() {
    const uint64_t t = Varint();
    return {static_cast<uint32_t>(t >> 3), static_cast<int>(t & 7)};
  }
  Wire Sub() {
    const uint64_t n = Varint();
    Need(n);
    Wire w(p_, n, file_);
    p_ += n;
    return w;
  }
  std::string Bytes() {
    const Wire w = Sub();
    return std::string(w.p_, w.end_);
  }
  float Fixed32() {
    Need(4);
    float f;
    std::memcpy(&f, p_, 4);
    p_ += 4;
    return f;
  }
  void Skip(int type) {
    switch (type) {
      case 0: Varint(); return;
      case 1: Need(8); p_ += 8; return;
      case 2: Sub(); return;
      case 5: Need(4); p_ += 4; return;
      default: Fail();
    }
  }

 private:
  void Need(uint64_t n) const {
    if (static_cast<uint64_t>(end_ - p_) < n) Fail();
  }
  [[noreturn]] void Fail() const { throw Error(file_ + ": not a sentencepiece model (malformed protobuf)"); }
  const char* p_;
  const char* end_;
  const std::string& file_;
};

}  // namespace

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& model_path) {
  std::ifstream in(model_path, std::ios::binary);
  if (!in) throw Error(model_path + ": cannot open the tokenizer model");
  Load(std::string((std::istreambuf_iterator<char>(in)), {}), model_path);
}

SentencePieceTokenizer SentencePieceTokenizer::FromBytes(const std::string& bytes, const std::string& name) {
  SentencePieceTokenizer t;
  t.Load(bytes, name);
  return t;
}

void SentencePieceTokenizer::Load(const std::string& bytes, const std::string& model_path) {
  name_ = model_path;
  int model_type = 1;  // the proto's default: unigram
  std::string bos_piece = "<s>", eos_piece = "</s>", normalizer;
  bool charsmap = false;
  Wire model(bytes.data(), bytes.size(), model_path);
  while (!model.done()) {
    const auto [field, type] = model.Tag();
    if (field == 1 && type == 2) {
      Wire w = model.Sub();
      Entry p;
      while (!w.done()) {
        const auto [f, t] = w.Tag();
        if (f == 1 && t == 2) p.text = w.Bytes();
        else if (f == 2 && t == 5) p.score = w.Fixed32();
        else if (f == 3 && t == 0) p.type = static_cast<Type>(w.Varint());
        else w.Skip(t);
      }
      pieces_.push_back(p);
    } else if (field == 2 && type == 2) {
      Wire w = model.Sub();
      while (!w.done()) {
        const auto [f, t] = w.Tag();
        if (f == 3 && t == 0) model_type = static_cast<int>(w.Varint());
        else if (f == 35 && t == 0) byte_fallback_ = w.Varint() != 0;
        else if (f == 46 && t == 2) bos_piece = w.Bytes();
        else if (f == 47 && t == 2) eos_piece = w.Bytes();
        else w.Skip(t);
      }
    } else if (field == 3 && type == 2) {
      Wire w = model.Sub();
      while (!w.done()) {
        const auto [f, t] = w.Tag();
        if (f == 1 && t == 2) normalizer = w.Bytes();
        else if (f == 2 && t == 2) charsmap = !w.Bytes().empty();
        else if (f == 3 && t == 0) add_dummy_prefix_ = w.Varint() != 0;
        else if (f == 4 && t == 0) remove_extra_whitespaces_ = w.Varint() != 0;
        else if (f == 5 && t == 0) escape_whitespaces_ = w.Varint() != 0;
        else w.Skip(t);
      }
    } else {
      model.Skip(type);
    }
  }
  if (pieces_.empty()) throw Error(model_path + ": not a sentencepiece model (no pieces)");
  if (model_type != 2) {
    throw Error(model_path + ": sentencepiece model type " + std::to_string(model_type) +
                " is not supported; only BPE models (type 2, as Llama's) are");
  }
  std::fill(std::begin(byte_ids_), std::end(byte_ids_), -1);
  bos_ = eos_ = unk_ = -1;
  for (size_t i = 0; i < pieces_.size(); ++i) {
    const Entry& p = pieces_[i];
    const auto id = static_cast<int64_t>(i);
    if (p.type == Type::kNormal || p.type == Type::kUserDefined || p.type == Type::kUnused) ids_.emplace(p.text, id);
    if (p.type == Type::kUserDefined) user_symbols_.push_back(p.text);
    if (p.type == Type::kUnknown) unk_ = id;
    if (p.type == Type::kControl && p.text == bos_piece) bos_ = id;
    if (p.type == Type::kControl && p.text == eos_piece) eos_ = id;
    if (p.type == Type::kByte) {
      const int byte = ByteOfPiece(p.text);
      if (byte < 0) throw Error(model_path + ": byte piece " + std::to_string(i) + " is not of the form <0xHH>");
      byte_ids_[byte] = id;
    }
  }
  if (unk_ < 0 || bos_ < 0 || eos_ < 0) {
    throw Error(model_path + ": the sentencepiece model lacks an unk, BOS (" + bos_piece + ") or EOS (" +
                eos_piece + ") piece; training needs all three");
  }
  std::sort(user_symbols_.begin(), user_symbols_.end(),
            [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  if (charsmap) {
    spdlog::warn("{}: the model's '{}' Unicode normalisation is not applied (only whitespace rules are); text "
                 "outside ASCII may tokenize differently", model_path, normalizer);
  }
}

int64_t SentencePieceTokenizer::Find(const std::string& piece) const {
  const auto it = ids_.find(piece);
  return it == ids_.end() ? -1 : it->second;
}

std::optional<int64_t> SentencePieceTokenizer::TokenId(const std::string& piece) const {
  const int64_t id = Find(piece);
  if (id >= 0) return id;
  for (size_t i = 0; i < pieces_.size(); ++i) {  // control pieces (<s>, </s>) are not in ids_
    if (pieces_[i].text == piece && pieces_[i].type != Type::kByte) return static_cast<int64_t>(i);
  }
  return std::nullopt;
}

std::string SentencePieceTokenizer::Piece(int64_t id) const {
  return id >= 0 && id < vocab_size() ? pieces_[id].text : std::string();
}

std::string SentencePieceTokenizer::Normalize(const std::string& text) const {
  std::string s;
  for (size_t i = 0; i < text.size(); ++i) {
    const bool space = text[i] == ' ';
    if (remove_extra_whitespaces_ && space && (s.empty() || s.back() == ' ')) continue;
    s += text[i];
  }
  if (remove_extra_whitespaces_ && !s.empty() && s.back() == ' ') s.pop_back();
  if (s.empty()) return s;
  if (add_dummy_prefix_) s.insert(s.begin(), ' ');
  if (!escape_whitespaces_) return s;
  std::string out;
  for (char c : s) {
    if (c == ' ') out += kSpace;
    else out += c;
  }
  return out;
}

std::vector<int64_t> SentencePieceTokenizer::Encode(const std::string& text, bool /*continues*/) const {
  const std::string s = Normalize(text);
  // Initial symbols: user-defined symbols whole (and never merged), otherwise one UTF-8 character each.
  struct Symbol {
    size_t begin, size;
    int prev, next;
    bool frozen;
  };
  std::vector<Symbol> sym;
  for (size_t i = 0; i < s.size();) {
    size_t n = 0;
    bool frozen = false;
    for (const std::string& u : user_symbols_) {
      if (s.compare(i, u.size(), u) == 0) {
        n = u.size();
        frozen = true;
        break;
      }
    }
    if (n == 0) n = std::min(Utf8Length(static_cast<unsigned char>(s[i])), s.size() - i);
    const int idx = static_cast<int>(sym.size());
    sym.push_back({i, n, idx - 1, idx + 1, frozen});
    i += n;
  }
  if (!sym.empty()) sym.back().next = -1;

  struct Pair {
    int left, right;
    float score;
    size_t size;
  };
  const auto worse = [](const Pair& a, const Pair& b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  };
  std::priority_queue<Pair, std::vector<Pair>, decltype(worse)> agenda(worse);
  std::unordered_map<std::string, std::pair<std::string, std::string>> unmerge;  // for unused pieces
  const auto consider = [&](int l, int r) {
    if (l < 0 || r < 0 || sym[l].frozen || sym[r].frozen) return;
    const std::string piece = s.substr(sym[l].begin, sym[l].size + sym[r].size);
    const int64_t id = Find(piece);
    if (id < 0) return;
    agenda.push({l, r, pieces_[id].score, piece.size()});
    if (pieces_[id].type == Type::kUnused) {
      unmerge[piece] = {s.substr(sym[l].begin, sym[l].size), s.substr(sym[r].begin, sym[r].size)};
    }
  };
  for (size_t i = 1; i < sym.size(); ++i) consider(static_cast<int>(i) - 1, static_cast<int>(i));
  while (!agenda.empty()) {
    const Pair top = agenda.top();
    agenda.pop();
    Symbol& l = sym[top.left];
    Symbol& r = sym[top.right];
    if (l.size == 0 || r.size == 0 || l.size + r.size != top.size) continue;  // stale
    l.size += r.size;
    r.size = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = top.left;
    consider(l.prev, top.left);
    consider(top.left, l.next);
  }

  std::vector<int64_t> ids;
  bool last_unk = false;
  std::function<void(const std::string&)> emit = [&](const std::string& piece) {
    const int64_t id = Find(piece);
    if (id >= 0 && pieces_[id].type == Type::kUnused) {
      const auto it = unmerge.find(piece);
      if (it != unmerge.end()) {
        emit(it->second.first);
        emit(it->second.second);
        return;
      }
    }
    if (id >= 0) {
      ids.push_back(id);
      last_unk = false;
    } else if (byte_fallback_) {
      for (unsigned char b : piece) ids.push_back(byte_ids_[b] >= 0 ? byte_ids_[b] : unk_);
      last_unk = false;
    } else if (!last_unk) {  // a run of unknown characters is one unk
      ids.push_back(unk_);
      last_unk = true;
    }
  };
  for (int i = sym.empty() ? -1 : 0; i >= 0; i = sym[i].next) emit(s.substr(sym[i].begin, sym[i].size));
  return ids;
}

std::string SentencePieceTokenizer::Decode(const std::vector<int64_t>& ids) const {
  std::string out;
  for (int64_t id : ids) {
    CS_CHECK(id >= 0 && id < vocab_size(), "token id ", id, " outside the vocabulary of ", vocab_size());
    const Entry& p = pieces_[id];
    if (p.type == Type::kByte) out += static_cast<char>(ByteOfPiece(p.text));
    else if (p.type == Type::kUnknown) out += " \xe2\x81\x87 ";
    else if (p.type != Type::kControl) out += p.text;
  }
  std::string text;
  for (size_t i = 0; i < out.size();) {
    if (out.compare(i, kSpace.size(), kSpace) == 0) {
      text += ' ';
      i += kSpace.size();
    } else {
      text += out[i++];
    }
  }
  if (add_dummy_prefix_ && !text.empty() && text[0] == ' ') text.erase(0, 1);
  return text;
}

}  // namespace cornstarch
