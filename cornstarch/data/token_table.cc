#include "cornstarch/data/token_table.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "cornstarch/base/check.h"
#include "cornstarch/plan/bitfield_mask.h"

namespace cornstarch {

std::vector<TokenRow> SampleRows(const TokenizedSample& sample, const std::vector<std::string>& encoders) {
  const std::vector<int64_t> words = BuildMaskWords(sample.spans, static_cast<int>(encoders.size()));
  std::vector<TokenRow> rows(sample.ids.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    rows[i] = {sample.ids[i], sample.labels[i], static_cast<int64_t>(i), words[i], ""};
  }
  // The k-th media span is the k-th media reference: both are in order of position.
  size_t k = 0;
  int64_t at = 0;
  for (const MaskSpan& span : sample.spans) {
    if (span.kind >= 0) {
      CS_CHECK(k < sample.media.size() && sample.media[k].position == at, "media span at ", at);
      const MediaRef& m = sample.media[k++];
      for (int64_t j = at; j < at + span.length; ++j) rows[j].media = encoders[m.encoder] + " " + m.path;
    }
    at += span.length;
  }
  return rows;
}

std::string DescribeMaskWord(int64_t word) {
  if (word == 0) return "pad";
  std::string groups;
  for (int b = 1; b <= kMaxGroups; ++b) {
    if (word & (int64_t{1} << b)) groups += (groups.empty() ? "g" : ",g") + std::to_string(b);
  }
  return std::string(word & kTextBit ? "text " : "media ") + groups;
}

namespace {

// A piece as a JSON string: quotes, escapes for control characters, U+FFFD for bytes that are not UTF-8.
std::string Quoted(const std::string& piece) {
  return nlohmann::json(piece).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

std::string TokenTable(const std::vector<TokenRow>& rows, const Tokenizer* tokenizer) {
  const auto piece = [&](int64_t id) { return tokenizer ? Quoted(tokenizer->Piece(id)) : std::string(); };
  std::string out = fmt::format("{:>6} {:>8}  {:<24} {:>8}  {:<24} {:>6}  {:<14} {}\n", "pos", "id", "piece", "label",
                                "label piece", "rope", "mask", "media");
  for (size_t i = 0; i < rows.size(); ++i) {
    const TokenRow& r = rows[i];
    const bool ignored = r.label == -100;
    out += fmt::format("{:>6} {:>8}  {:<24} {:>8}  {:<24} {:>6}  {:<14} {}\n", i, r.id, piece(r.id),
                       ignored ? "-" : std::to_string(r.label), ignored ? "" : piece(r.label), r.position,
                       DescribeMaskWord(r.word), r.media);
  }
  return out;
}

}  // namespace cornstarch
