#include "cornstarch/data/hf_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <queue>
#include <unordered_map>

#include "cornstarch/base/check.h"
#include "cornstarch/base/json.h"

namespace cornstarch {

namespace {

using Json = nlohmann::json;

// Caps checked before anything is sized from the file.
constexpr int64_t kMaxTokenId = int64_t{1} << 24;  // ids index a vector; the largest vocabularies are ~256k
constexpr uint32_t kMatchLimit = 10'000'000;        // PCRE2 backtracking steps per match

// A JSON value with the path that reached it, so every complaint names where in the file it is.
struct Node {
  const Json& j;
  std::string path;
  const std::string& file;

  [[noreturn]] void Fail(const std::string& what) const { throw Error(file + ": " + path + ": " + what); }
  bool Has(const char* key) const { return j.is_object() && j.contains(key) && !j[key].is_null(); }
  Node operator[](const char* key) const {
    if (!Has(key)) Fail(std::string("expected the field \"") + key + "\"");
    return {j[key], path + "." + key, file};
  }
  Node At(size_t i) const { return {j[i], path + "[" + std::to_string(i) + "]", file}; }
  std::string Str() const {
    if (!j.is_string()) Fail("expected a string, got " + std::string(j.type_name()));
    return j.get<std::string>();
  }
  bool Bool(const char* key, bool fallback) const {
    if (!Has(key)) return fallback;
    if (!j[key].is_boolean()) (*this)[key].Fail("expected true or false");
    return j[key].get<bool>();
  }
  int64_t Int() const {
    if (!j.is_number_integer()) Fail("expected an integer");
    return j.get<int64_t>();
  }
  const Json& Array() const {
    if (!j.is_array()) Fail("expected a list");
    return j;
  }
  std::string Type() const { return (*this)["type"].Str(); }
  [[noreturn]] void Unsupported(const std::string& what, const char* supported) const {
    Fail(what + " is not supported (supported: " + supported + ")");
  }
};

// A compiled PCRE2 pattern; matches never overlap, empty ones are skipped.
class Regex {
 public:
  Regex(const std::string& pattern, bool literal, const Node& where) {
    int err = 0;
    PCRE2_SIZE at = 0;
    // PCRE2_LITERAL admits no other pattern options than these.
    const uint32_t options = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &err, &at,
                          nullptr);
    if (!code_) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(err, message, sizeof message);
      where.Fail("the pattern does not compile at offset " + std::to_string(at) + ": " +
                 reinterpret_cast<const char*>(message));
    }
    context_ = pcre2_match_context_create(nullptr);
    pcre2_set_match_limit(context_, kMatchLimit);
  }
  Regex(const Regex&) = delete;
  ~Regex() {
    pcre2_match_context_free(context_);
    pcre2_code_free(code_);
  }

  // [begin, end) of every match, left to right.
  std::vector<std::pair<size_t, size_t>> FindAll(const std::string& s) const {
    std::vector<std::pair<size_t, size_t>> found;
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(code_, nullptr);
    size_t at = 0;
    while (at < s.size()) {
      const int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), at, 0, md, context_);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) {
        pcre2_match_data_free(md);
        throw Error("tokenizer pattern: matching failed (PCRE2 error " + std::to_string(rc) +
                    "; a pattern that backtracks without bound?)");
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      if (ov[1] > ov[0]) {
        found.emplace_back(ov[0], ov[1]);
        at = ov[1];
      } else {  // an empty match: move one character on
        at = ov[0] + 1;
        while (at < s.size() && (static_cast<unsigned char>(s[at]) & 0xc0) == 0x80) ++at;
      }
    }
    pcre2_match_data_free(md);
    return found;
  }

 private:
  pcre2_code* code_ = nullptr;
  pcre2_match_context* context_ = nullptr;
};

std::shared_ptr<Regex> PatternOf(const Node& n) {
  const Node p = n["pattern"];
  if (p.Has("Regex")) return std::make_shared<Regex>(p["Regex"].Str(), false, p["Regex"]);
  if (p.Has("String")) return std::make_shared<Regex>(p["String"].Str(), true, p["String"]);
  p.Fail("expected {\"Regex\": ...} or {\"String\": ...}");
}

std::string ReplaceAll(const std::string& s, const Regex& pattern, const std::string& content) {
  std::string out;
  size_t last = 0;
  for (const auto& [b, e] : pattern.FindAll(s)) {
    out.append(s, last, b - last);
    out += content;
    last = e;
  }
  return out.append(s, last, std::string::npos);
}

std::string ReplaceLiteral(const std::string& s, const std::string& from, const std::string& to) {
  std::string out;
  size_t last = 0;
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, last)) {
    out.append(s, last, at - last);
    out += to;
    last = at + from.size();
  }
  return out.append(s, last, std::string::npos);
}

// GPT-2's byte-to-unicode map: printable Latin-1 bytes stand for themselves, the others for U+0100 onwards.
struct ByteMap {
  std::array<std::string, 256> symbol;      // byte -> UTF-8 of its code point
  std::unordered_map<uint32_t, uint8_t> byte;  // code point -> byte
  ByteMap() {
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae);
      const uint32_t cp = printable ? b : next++;
      byte[cp] = static_cast<uint8_t>(b);
      symbol[b] = cp < 0x80 ? std::string(1, static_cast<char>(cp))
                            : std::string{static_cast<char>(0xc0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3f))};
    }
  }
};
const ByteMap& Bytes() {
  static const ByteMap map;
  return map;
}

// The code point of the (valid) UTF-8 character at s[i..i+n); 0xFFFFFFFF when it is not one.
uint32_t CodePoint(const std::string& s, size_t i, size_t n) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  if (n == 1) return b(0) < 0x80 ? b(0) : 0xffffffffu;
  uint32_t cp = b(0) & (0xff >> (n + 1));
  for (size_t k = 1; k < n; ++k) {
    if ((b(k) & 0xc0) != 0x80) return 0xffffffffu;
    cp = (cp << 6) | (b(k) & 0x3f);
  }
  return cp;
}

// Invalid UTF-8 replaced by U+FFFD, one per maximal invalid subsequence (as Rust's from_utf8_lossy does).
std::string Utf8Lossy(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t need = c < 0x80 ? 0 : c >= 0xc2 && c <= 0xdf ? 1 : c >= 0xe0 && c <= 0xef ? 2 : c >= 0xf0 && c <= 0xf4 ? 3 : 9;
    if (need == 0) {
      out += s[i++];
      continue;
    }
    size_t k = 1;
    if (need != 9) {
      const unsigned char lo = c == 0xe0 ? 0xa0 : c == 0xf0 ? 0x90 : 0x80;
      const unsigned char hi = c == 0xed ? 0x9f : c == 0xf4 ? 0x8f : 0xbf;
      for (; k <= need && i + k < s.size(); ++k) {
        const unsigned char d = static_cast<unsigned char>(s[i + k]);
        if (d < (k == 1 ? lo : 0x80) || d > (k == 1 ? hi : 0xbf)) break;
      }
    }
    if (need != 9 && k == need + 1) {
      out.append(s, i, k);
    } else {
      out += "\xef\xbf\xbd";
    }
    i += k;
  }
  return out;
}

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
enum class Prepend { kAlways, kFirst, kNever };

Behavior BehaviorOf(const Node& n) {
  const std::string b = n.Str();
  if (b == "Removed") return Behavior::kRemoved;
  if (b == "Isolated") return Behavior::kIsolated;
  if (b == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::kMergedWithNext;
  if (b == "Contiguous") return Behavior::kContiguous;
  n.Unsupported("'" + b + "'", "Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous");
}

// Metaspace's prepend_scheme, or the older add_prefix_space flag.
Prepend PrependOf(const Node& n) {
  if (!n.Has("prepend_scheme")) return n.Bool("add_prefix_space", true) ? Prepend::kAlways : Prepend::kNever;
  const std::string s = n["prepend_scheme"].Str();
  if (s == "always") return Prepend::kAlways;
  if (s == "first") return Prepend::kFirst;
  if (s == "never") return Prepend::kNever;
  n["prepend_scheme"].Unsupported("'" + s + "'", "always, first, never");
}

// Splits `s` at the pattern's matches the way the tokenizers library's SplitDelimiterBehavior does; empty parts
// are dropped.
std::vector<std::string> SplitBy(const std::string& s, const Regex& pattern, Behavior behavior, bool invert) {
  struct Part {
    size_t begin, end;
    bool match;
  };
  std::vector<Part> parts;
  size_t last = 0;
  for (const auto& [b, e] : pattern.FindAll(s)) {
    if (b > last) parts.push_back({last, b, invert});
    parts.push_back({b, e, !invert});
    last = e;
  }
  if (last < s.size()) parts.push_back({last, s.size(), invert});
  std::vector<Part> merged;
  switch (behavior) {
    case Behavior::kRemoved:
      for (const Part& p : parts) if (!p.match) merged.push_back(p);
      break;
    case Behavior::kIsolated:
      merged = parts;
      break;
    case Behavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const Part& p : parts) {
        if (p.match && !previous_match && !merged.empty()) merged.back().end = p.end;
        else merged.push_back(p);
        previous_match = p.match;
      }
      break;
    }
    case Behavior::kMergedWithNext: {
      bool previous_match = false;
      for (auto p = parts.rbegin(); p != parts.rend(); ++p) {
        if (p->match && !previous_match && !merged.empty()) merged.back().begin = p->begin;
        else merged.push_back(*p);
        previous_match = p->match;
      }
      std::reverse(merged.begin(), merged.end());
      break;
    }
    case Behavior::kContiguous: {
      bool previous_match = false;
      for (const Part& p : parts) {
        if (p.match && previous_match && !merged.empty()) merged.back().end = p.end;
        else merged.push_back(p);
        previous_match = p.match;
      }
      break;
    }
  }
  std::vector<std::string> out;
  for (const Part& p : merged) {
    if (p.end > p.begin) out.push_back(s.substr(p.begin, p.end - p.begin));
  }
  return out;
}

struct Normalizer {
  enum class Kind { kUnicode, kPrepend, kReplace } kind;
  const icu::Normalizer2* unicode = nullptr;
  std::string text;  // Prepend's prefix, Replace's content
  std::shared_ptr<Regex> pattern;
};

struct PreTokenizer {
  enum class Kind { kSplit, kByteLevel, kMetaspace } kind;
  std::shared_ptr<Regex> pattern;  // Split's, or ByteLevel's GPT-2 regex when use_regex
  Behavior behavior = Behavior::kIsolated;
  bool invert = false;
  bool add_prefix_space = false;
  std::string replacement;  // Metaspace
  Prepend prepend = Prepend::kAlways;
  bool split = false;
};

struct Decoder {
  enum class Kind { kByteLevel, kMetaspace, kReplace, kByteFallback, kFuse, kStrip } kind;
  std::string text;  // Metaspace's replacement, Replace's content, Strip's content
  std::shared_ptr<Regex> pattern;
  Prepend prepend = Prepend::kAlways;
  int64_t start = 0, stop = 0;
};

struct AddedToken {
  std::string content;
  int64_t id;
  bool lstrip, rstrip, single_word;
};

const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
bool IsWordByte(char c) {
  const auto u = static_cast<unsigned char>(c);
  return std::isalnum(u) || c == '_' || u >= 0x80;
}

}  // namespace

struct HfTokenizer::Impl {
  std::string name;
  std::vector<Normalizer> normalizers;
  std::vector<PreTokenizer> pre_tokenizers;
  std::vector<Decoder> decoders;
  bool has_decoder = false;
  std::vector<AddedToken> added;  // longest first
  std::unordered_map<std::string, int64_t> added_ids;

  // The BPE model.
  std::unordered_map<std::string, int64_t> vocab;
  std::vector<std::string> pieces;  // id -> text, added tokens included
  std::unordered_map<uint64_t, std::pair<int32_t, int64_t>> merges;  // (left, right) -> (rank, merged id)
  int64_t unk = -1, bos = -1, eos = -1;
  bool byte_fallback = false, fuse_unk = false, ignore_merges = false;
  std::array<int64_t, 256> byte_ids;

  static uint64_t Key(int64_t a, int64_t b) { return (static_cast<uint64_t>(a) << 32) | static_cast<uint64_t>(b); }

  void SetPiece(int64_t id, const std::string& text, const Node& where) {
    if (id < 0 || id >= kMaxTokenId) where.Fail("token id " + std::to_string(id) + " outside [0, 2^24)");
    if (static_cast<size_t>(id) >= pieces.size()) pieces.resize(id + 1);
    pieces[id] = text;
  }

  // A step of type "Sequence": each step of its list `key`, read by `read`. False for any other type.
  template <class F>
  static bool ReadSequence(const Node& n, const char* key, F&& read) {
    if (n.Type() != "Sequence") return false;
    const Node list = n[key];
    for (size_t i = 0; i < list.Array().size(); ++i) read(list.At(i));
    return true;
  }

  void ReadNormalizer(const Node& n) {
    if (ReadSequence(n, "normalizers", [&](const Node& step) { ReadNormalizer(step); })) return;
    const std::string type = n.Type();
    UErrorCode status = U_ZERO_ERROR;
    Normalizer step{};
    if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
      step.kind = Normalizer::Kind::kUnicode;
      step.unicode = type == "NFC" ? icu::Normalizer2::getNFCInstance(status)
                     : type == "NFD" ? icu::Normalizer2::getNFDInstance(status)
                     : type == "NFKC" ? icu::Normalizer2::getNFKCInstance(status)
                                      : icu::Normalizer2::getNFKDInstance(status);
      if (U_FAILURE(status)) n.Fail("ICU has no " + type + " data");
    } else if (type == "Prepend") {
      step.kind = Normalizer::Kind::kPrepend;
      step.text = n["prepend"].Str();
    } else if (type == "Replace") {
      step.kind = Normalizer::Kind::kReplace;
      step.pattern = PatternOf(n);
      step.text = n["content"].Str();
    } else {
      n["type"].Unsupported("normalizer '" + type + "'", "NFC, NFD, NFKC, NFKD, Prepend, Replace, Sequence");
    }
    normalizers.push_back(std::move(step));
  }

  void ReadPreTokenizer(const Node& n) {
    if (ReadSequence(n, "pretokenizers", [&](const Node& step) { ReadPreTokenizer(step); })) return;
    const std::string type = n.Type();
    PreTokenizer step{};
    if (type == "Split") {
      step.kind = PreTokenizer::Kind::kSplit;
      step.pattern = PatternOf(n);
      step.behavior = BehaviorOf(n["behavior"]);
      step.invert = n.Bool("invert", false);
    } else if (type == "ByteLevel") {
      step.kind = PreTokenizer::Kind::kByteLevel;
      step.add_prefix_space = n.Bool("add_prefix_space", true);
      if (n.Bool("use_regex", true)) step.pattern = std::make_shared<Regex>(kGpt2Pattern, false, n);
    } else if (type == "Metaspace") {
      step.kind = PreTokenizer::Kind::kMetaspace;
      step.replacement = n["replacement"].Str();
      step.prepend = PrependOf(n);
      step.split = n.Bool("split", true);
      step.pattern = std::make_shared<Regex>(step.replacement, true, n);
    } else {
      n["type"].Unsupported("pre-tokenizer '" + type + "'", "ByteLevel, Split, Metaspace, Sequence");
    }
    pre_tokenizers.push_back(std::move(step));
  }

  void ReadDecoder(const Node& n) {
    if (ReadSequence(n, "decoders", [&](const Node& step) { ReadDecoder(step); })) return;
    const std::string type = n.Type();
    Decoder step{};
    if (type == "ByteLevel") {
      step.kind = Decoder::Kind::kByteLevel;
    } else if (type == "Metaspace") {
      step.kind = Decoder::Kind::kMetaspace;
      step.text = n["replacement"].Str();
      step.prepend = PrependOf(n);
    } else if (type == "Replace") {
      step.kind = Decoder::Kind::kReplace;
      step.pattern = PatternOf(n);
      step.text = n["content"].Str();
    } else if (type == "ByteFallback") {
      step.kind = Decoder::Kind::kByteFallback;
    } else if (type == "Fuse") {
      step.kind = Decoder::Kind::kFuse;
    } else if (type == "Strip") {
      step.kind = Decoder::Kind::kStrip;
      step.text = n["content"].Str();
      if (step.text.empty() || Utf8Length(static_cast<unsigned char>(step.text[0])) != step.text.size()) {
        n["content"].Fail("expected one character");
      }
      step.start = n["start"].Int();
      step.stop = n["stop"].Int();
    } else {
      n["type"].Unsupported("decoder '" + type + "'", "ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, "
                            "Sequence");
    }
    decoders.push_back(std::move(step));
  }

  void ReadModel(const Node& m) {
    const std::string type = m.Type();
    if (type != "BPE") m["type"].Unsupported("model '" + type + "'", "BPE");
    for (const char* field : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      if (m.Has(field) && !m[field].Str().empty()) m[field].Unsupported("a non-empty affix", "null or \"\"");
    }
    if (m.Has("dropout") && (!m.j["dropout"].is_number() || m.j["dropout"].get<double>() != 0)) {
      m["dropout"].Unsupported("BPE dropout", "null");
    }
    byte_fallback = m.Bool("byte_fallback", false);
    fuse_unk = m.Bool("fuse_unk", false);
    ignore_merges = m.Bool("ignore_merges", false);
    const Node v = m["vocab"];
    if (!v.j.is_object()) v.Fail("expected an object of token -> id");
    for (const auto& [text, id] : v.j.items()) {
      const Node entry{id, v.path + "[\"" + text + "\"]", name};
      const int64_t i = entry.Int();
      SetPiece(i, text, entry);
      vocab[text] = i;
    }
    const Node list = m["merges"];
    for (size_t r = 0; r < list.Array().size(); ++r) {
      const Node merge = list.At(r);
      std::string a, b;
      if (merge.j.is_string()) {  // "a b"
        const std::string s = merge.Str();
        const size_t space = s.find(' ');
        if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
          merge.Fail("expected two tokens separated by one space");
        }
        a = s.substr(0, space), b = s.substr(space + 1);
      } else if (merge.j.is_array() && merge.j.size() == 2) {  // ["a", "b"]
        a = merge.At(0).Str(), b = merge.At(1).Str();
      } else {
        merge.Fail("expected \"a b\" or [\"a\", \"b\"]");
      }
      const auto ia = vocab.find(a), ib = vocab.find(b), ic = vocab.find(a + b);
      if (ia == vocab.end() || ib == vocab.end() || ic == vocab.end()) {
        merge.Fail("merges '" + a + "' and '" + b + "', which (or whose union) is not in model.vocab");
      }
      merges.emplace(Key(ia->second, ib->second), std::make_pair(static_cast<int32_t>(r), ic->second));
    }
    if (m.Has("unk_token")) {
      const auto it = vocab.find(m["unk_token"].Str());
      if (it == vocab.end()) m["unk_token"].Fail("not in model.vocab");
      unk = it->second;
    }
    byte_ids.fill(-1);
    for (int b = 0; b < 256; ++b) {
      static const char* hex = "0123456789ABCDEF";
      const auto it = vocab.find(std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">");
      if (it != vocab.end()) byte_ids[b] = it->second;
    }
  }

  void ReadAddedTokens(const Node& list) {
    for (size_t i = 0; i < list.Array().size(); ++i) {
      const Node t = list.At(i);
      AddedToken a{t["content"].Str(), t["id"].Int(), t.Bool("lstrip", false), t.Bool("rstrip", false),
                   t.Bool("single_word", false)};
      if (a.content.empty()) t["content"].Fail("an added token must not be empty");
      SetPiece(a.id, a.content, t["id"]);
      added_ids[a.content] = a.id;
      added.push_back(std::move(a));
    }
    std::stable_sort(added.begin(), added.end(),
                     [](const AddedToken& x, const AddedToken& y) { return x.content.size() > y.content.size(); });
  }

  // bos_token / eos_token of tokenizer_config.json: a string or {"content": ...}.
  void ReadConfig(const std::string& text) {
    const std::string where = name + " (tokenizer_config.json beside it)";
    const Json config = ParseJson(text, where);
    const auto token = [&](const char* key) -> int64_t {
      if (!config.is_object() || !config.contains(key) || config[key].is_null()) return -1;
      const Json& v = config[key];
      const Json& content = v.is_object() && v.contains("content") ? v["content"] : v;
      if (!content.is_string()) throw Error(where + ": " + key + ": expected a string or {\"content\": string}");
      const std::optional<int64_t> id = Find(content.get<std::string>());
      if (!id) throw Error(where + ": " + key + " '" + content.get<std::string>() + "' is not a token");
      return *id;
    };
    bos = token("bos_token");
    eos = token("eos_token");
  }

  std::optional<int64_t> Find(const std::string& piece) const {
    if (const auto it = added_ids.find(piece); it != added_ids.end()) return it->second;
    if (const auto it = vocab.find(piece); it != vocab.end()) return it->second;
    return std::nullopt;
  }

  std::string Normalize(std::string s) const {
    for (const Normalizer& n : normalizers) {
      switch (n.kind) {
        case Normalizer::Kind::kUnicode: {
          UErrorCode status = U_ZERO_ERROR;
          const icu::UnicodeString u = n.unicode->normalize(icu::UnicodeString::fromUTF8(s), status);
          if (U_FAILURE(status)) throw Error(name + ": Unicode normalisation failed");
          s.clear();
          u.toUTF8String(s);
          break;
        }
        case Normalizer::Kind::kPrepend:
          if (!s.empty()) s = n.text + s;
          break;
        case Normalizer::Kind::kReplace:
          s = ReplaceAll(s, *n.pattern, n.text);
          break;
      }
    }
    return s;
  }

  // `first`: the stretch starts the text (Metaspace's prepend_scheme "first" prepends only there).
  std::vector<std::string> PreTokenize(const std::string& s, bool first) const {
    std::vector<std::string> pieces_now{s};
    for (const PreTokenizer& p : pre_tokenizers) {
      std::vector<std::string> next;
      for (size_t i = 0; i < pieces_now.size(); ++i) {
        std::string piece = pieces_now[i];
        switch (p.kind) {
          case PreTokenizer::Kind::kSplit:
            for (std::string& part : SplitBy(piece, *p.pattern, p.behavior, p.invert)) next.push_back(std::move(part));
            break;
          case PreTokenizer::Kind::kByteLevel: {
            if (p.add_prefix_space && piece[0] != ' ') piece.insert(piece.begin(), ' ');
            std::vector<std::string> parts = p.pattern ? SplitBy(piece, *p.pattern, Behavior::kIsolated, false)
                                                       : std::vector<std::string>{piece};
            for (const std::string& part : parts) {
              std::string mapped;
              for (unsigned char c : part) mapped += Bytes().symbol[c];
              next.push_back(std::move(mapped));
            }
            break;
          }
          case PreTokenizer::Kind::kMetaspace: {
            piece = ReplaceLiteral(piece, " ", p.replacement);
            const bool prepend = p.prepend == Prepend::kAlways || (p.prepend == Prepend::kFirst && first && i == 0);
            if (prepend && piece.compare(0, p.replacement.size(), p.replacement) != 0) piece = p.replacement + piece;
            if (!p.split) {
              next.push_back(std::move(piece));
              break;
            }
            for (std::string& part : SplitBy(piece, *p.pattern, Behavior::kMergedWithNext, false)) {
              next.push_back(std::move(part));
            }
            break;
          }
        }
      }
      pieces_now = std::move(next);
    }
    return pieces_now;
  }

  void Bpe(const std::string& word, std::vector<int64_t>& ids) const {
    if (ignore_merges) {
      if (const auto it = vocab.find(word); it != vocab.end()) {
        ids.push_back(it->second);
        return;
      }
    }
    struct Symbol {
      int64_t id;
      int prev, next;
    };
    std::vector<Symbol> sym;
    const auto add = [&](int64_t id) {
      const int n = static_cast<int>(sym.size());
      sym.push_back({id, n - 1, n + 1});
    };
    for (size_t i = 0; i < word.size();) {
      const size_t n = std::min(Utf8Length(static_cast<unsigned char>(word[i])), word.size() - i);
      const std::string c = word.substr(i, n);
      i += n;
      if (const auto it = vocab.find(c); it != vocab.end()) {
        add(it->second);
        continue;
      }
      if (byte_fallback && std::all_of(c.begin(), c.end(), [&](char b) { return byte_ids[static_cast<uint8_t>(b)] >= 0; })) {
        for (char b : c) add(byte_ids[static_cast<uint8_t>(b)]);
        continue;
      }
      if (unk < 0) continue;  // no unk token: the character is dropped, as the library does
      if (fuse_unk && !sym.empty() && sym.back().id == unk) continue;
      add(unk);
    }
    if (sym.empty()) return;
    sym.back().next = -1;

    struct Candidate {
      int32_t rank;
      int left;
      int64_t left_id, right_id, merged;
    };
    const auto later = [](const Candidate& a, const Candidate& b) {
      return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
    };
    std::priority_queue<Candidate, std::vector<Candidate>, decltype(later)> agenda(later);
    const auto consider = [&](int l) {
      if (l < 0 || sym[l].next < 0) return;
      const int r = sym[l].next;
      const auto it = merges.find(Key(sym[l].id, sym[r].id));
      if (it != merges.end()) agenda.push({it->second.first, l, sym[l].id, sym[r].id, it->second.second});
    };
    for (int i = 0; i + 1 < static_cast<int>(sym.size()); ++i) consider(i);
    while (!agenda.empty()) {
      const Candidate c = agenda.top();
      agenda.pop();
      Symbol& l = sym[c.left];
      if (l.id != c.left_id || l.next < 0 || sym[l.next].id != c.right_id) continue;  // stale
      Symbol& r = sym[l.next];
      l.id = c.merged;
      l.next = r.next;
      if (r.next >= 0) sym[r.next].prev = c.left;
      r.id = -1;
      consider(l.prev);
      consider(c.left);
    }
    for (int i = 0; i >= 0; i = sym[i].next) ids.push_back(sym[i].id);
  }

  void EncodeStretch(const std::string& text, bool first, std::vector<int64_t>& ids) const {
    const std::string normalized = Normalize(text);
    if (normalized.empty()) return;
    for (const std::string& piece : PreTokenize(normalized, first)) Bpe(piece, ids);
  }

  std::vector<std::string> DecodeChain(std::vector<std::string> tokens) const {
    for (const Decoder& d : decoders) {
      std::vector<std::string> next;
      switch (d.kind) {
        case Decoder::Kind::kByteLevel: {
          // A token all of whose characters are byte symbols becomes those bytes; any other is kept as it is.
          std::string bytes;
          for (const std::string& t : tokens) {
            std::string mine;
            size_t i = 0;
            while (i < t.size()) {
              const size_t n = std::min(Utf8Length(static_cast<unsigned char>(t[i])), t.size() - i);
              const auto it = Bytes().byte.find(static_cast<uint32_t>(CodePoint(t, i, n)));
              if (it == Bytes().byte.end()) break;
              mine += static_cast<char>(it->second);
              i += n;
            }
            bytes += i == t.size() ? mine : t;
          }
          next.push_back(Utf8Lossy(bytes));
          break;
        }
        case Decoder::Kind::kMetaspace:
          for (size_t i = 0; i < tokens.size(); ++i) {
            std::string t = ReplaceLiteral(tokens[i], d.text, " ");
            if (i == 0 && d.prepend != Prepend::kNever && !t.empty() && t[0] == ' ') t.erase(0, 1);
            next.push_back(std::move(t));
          }
          break;
        case Decoder::Kind::kReplace:
          for (const std::string& t : tokens) next.push_back(ReplaceAll(t, *d.pattern, d.text));
          break;
        case Decoder::Kind::kByteFallback: {
          std::string pending;
          size_t count = 0;
          const auto flush = [&] {
            if (count == 0) return;
            if (Utf8Lossy(pending) == pending) next.push_back(pending);
            else for (size_t k = 0; k < count; ++k) next.push_back("\xef\xbf\xbd");
            pending.clear();
            count = 0;
          };
          for (const std::string& t : tokens) {
            const int b = ByteOfPiece(t);
            if (b >= 0) {
              pending += static_cast<char>(b);
              ++count;
            } else {
              flush();
              next.push_back(t);
            }
          }
          flush();
          break;
        }
        case Decoder::Kind::kFuse: {
          std::string all;
          for (const std::string& t : tokens) all += t;
          next.push_back(std::move(all));
          break;
        }
        case Decoder::Kind::kStrip:
          for (std::string t : tokens) {
            for (int64_t k = 0; k < d.start && t.compare(0, d.text.size(), d.text) == 0; ++k) t.erase(0, d.text.size());
            for (int64_t k = 0; k < d.stop && t.size() >= d.text.size() &&
                                t.compare(t.size() - d.text.size(), d.text.size(), d.text) == 0; ++k) {
              t.erase(t.size() - d.text.size());
            }
            next.push_back(std::move(t));
          }
          break;
      }
      tokens = std::move(next);
    }
    return tokens;
  }
};

HfTokenizer::HfTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HfTokenizer::HfTokenizer(HfTokenizer&&) noexcept = default;
HfTokenizer& HfTokenizer::operator=(HfTokenizer&&) noexcept = default;
HfTokenizer::~HfTokenizer() = default;

HfTokenizer HfTokenizer::FromFile(const std::string& path) {
  const auto read = [](const std::string& p, std::string& text) {
    std::ifstream in(p, std::ios::binary);
    if (!in) return false;
    text.assign(std::istreambuf_iterator<char>(in), {});
    return true;
  };
  std::string text, config;
  if (!read(path, text)) throw Error(path + ": cannot open the tokenizer file");
  const size_t slash = path.rfind('/');
  read((slash == std::string::npos ? std::string() : path.substr(0, slash + 1)) + "tokenizer_config.json", config);
  return FromJson(text, path, config);
}

HfTokenizer HfTokenizer::FromJson(const std::string& text, const std::string& name, const std::string& config_text) {
  auto impl = std::make_unique<Impl>();
  impl->name = name;
  const Json doc = ParseJson(text, name);
  const Node root{doc, "tokenizer.json", impl->name};
  if (!doc.is_object()) root.Fail("expected an object");
  impl->ReadModel(root["model"]);
  if (root.Has("added_tokens")) impl->ReadAddedTokens(root["added_tokens"]);
  if (root.Has("normalizer")) impl->ReadNormalizer(root["normalizer"]);
  if (root.Has("pre_tokenizer")) impl->ReadPreTokenizer(root["pre_tokenizer"]);
  if (root.Has("decoder")) {
    impl->has_decoder = true;
    impl->ReadDecoder(root["decoder"]);
  }
  if (!config_text.empty()) {
    impl->ReadConfig(config_text);
  } else {
    for (const char* b : {"<|begin_of_text|>", "<s>"}) {
      if (const auto id = impl->Find(b); id && impl->bos < 0) impl->bos = *id;
    }
    for (const char* e : {"<|end_of_text|>", "</s>", "<|endoftext|>"}) {
      if (const auto id = impl->Find(e); id && impl->eos < 0) impl->eos = *id;
    }
  }
  return HfTokenizer(std::move(impl));
}

std::vector<int64_t> HfTokenizer::Encode(const std::string& text, bool continues) const {
  const Impl& m = *impl_;
  std::vector<int64_t> ids;
  size_t start = 0;  // of the stretch not yet encoded
  for (size_t i = 0; i < text.size();) {
    const AddedToken* hit = nullptr;
    for (const AddedToken& a : m.added) {
      if (text.compare(i, a.content.size(), a.content) != 0) continue;
      if (a.single_word && ((i > 0 && IsWordByte(text[i - 1])) ||
                            (i + a.content.size() < text.size() && IsWordByte(text[i + a.content.size()])))) {
        continue;
      }
      hit = &a;  // the longest, as they are sorted by length
      break;
    }
    if (!hit) {
      ++i;
      continue;
    }
    size_t end = i;
    if (hit->lstrip) while (end > start && IsSpace(text[end - 1])) --end;
    m.EncodeStretch(text.substr(start, end - start), start == 0 && !continues, ids);
    ids.push_back(hit->id);
    i += hit->content.size();
    if (hit->rstrip) while (i < text.size() && IsSpace(text[i])) ++i;
    start = i;
  }
  m.EncodeStretch(text.substr(start), start == 0 && !continues, ids);
  return ids;
}

std::string HfTokenizer::Decode(const std::vector<int64_t>& ids) const {
  std::vector<std::string> tokens;
  for (int64_t id : ids) {
    CS_CHECK(id >= 0 && id < vocab_size(), "token id ", id, " outside the vocabulary of ", vocab_size());
    tokens.push_back(impl_->pieces[id]);
  }
  std::string out;
  if (!impl_->has_decoder) {  // the library joins the tokens with spaces when the file has no decoder
    for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
    return out;
  }
  for (const std::string& t : impl_->DecodeChain(std::move(tokens))) out += t;
  return out;
}

int64_t HfTokenizer::vocab_size() const { return static_cast<int64_t>(impl_->pieces.size()); }
std::optional<int64_t> HfTokenizer::TokenId(const std::string& piece) const { return impl_->Find(piece); }
std::string HfTokenizer::Piece(int64_t id) const {
  return id >= 0 && id < vocab_size() ? impl_->pieces[id] : std::string();
}
int64_t HfTokenizer::bos() const { return impl_->bos; }
int64_t HfTokenizer::eos() const { return impl_->eos; }
int64_t HfTokenizer::unk() const { return impl_->unk; }
const std::string& HfTokenizer::name() const { return impl_->name; }

}  // namespace cornstarch
