#include "cornstarch/data/conversation.h"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <sstream>
#include <nlohmann/json.hpp>

#include "cornstarch/base/check.h"
#include "cornstarch/base/json.h"

namespace cornstarch {

namespace {

using Json = nlohmann::json;

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::vector<std::string> PathList(const Json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return {};
  if (j[key].is_string()) return {j[key].get<std::string>()};
  if (j[key].is_array()) {
    std::vector<std::string> paths;
    for (const Json& p : j[key]) {
      if (!p.is_string()) throw Error(where + ": \"" + key + "\" must hold paths (strings)");
      paths.push_back(p.get<std::string>());
    }
    return paths;
  }
  throw Error(where + ": \"" + key + "\" must be a path or a list of paths");
}

ConversationSample ParseSample(const Json& j, const std::string& where) {
  if (!j.is_object()) throw Error(where + ": expected an object, got " + std::string(j.type_name()));
  ConversationSample s;
  if (j.contains("id")) s.id = j["id"].is_string() ? j["id"].get<std::string>() : j["id"].dump();
  s.images = PathList(j, "image", where);
  s.audios = PathList(j, "audio", where);
  if (!j.contains("conversations") || !j["conversations"].is_array() || j["conversations"].empty()) {
    throw Error(where + ": expected \"conversations\": a non-empty list of {\"from\", \"value\"}");
  }
  for (const Json& t : j["conversations"]) {
    if (!t.is_object() || !t.contains("from") || !t["from"].is_string() || !t.contains("value") ||
        !t["value"].is_string()) {
      throw Error(where + ": every conversation turn needs string \"from\" and \"value\"");
    }
    s.turns.push_back({t["from"].get<std::string>(), t["value"].get<std::string>()});
  }
  return s;
}

size_t Count(const std::string& text, const std::string& piece) {
  size_t n = 0;
  for (size_t at = text.find(piece); at != std::string::npos; at = text.find(piece, at + piece.size())) ++n;
  return n;
}

}  // namespace

std::vector<ConversationSample> ReadConversations(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open the dataset file");
  return ParseConversations(std::string((std::istreambuf_iterator<char>(in)), {}), path);
}

ConversationSample ParseConversation(const std::string& text, const std::string& where) {
  return ParseSample(ParseJson(text, where), where);
}

std::vector<ConversationSample> ParseConversations(const std::string& text, const std::string& path) {
  std::vector<ConversationSample> samples;
  if (EndsWith(path, ".jsonl")) {
    std::istringstream lines(text);
    std::string line;
    for (int64_t number = 1; std::getline(lines, line); ++number) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const std::string where = path + ":" + std::to_string(number);
      const std::string sample = where + " (sample " + std::to_string(samples.size()) + ")";
      samples.push_back(ParseSample(ParseJson(line, where), sample));
    }
    return samples;
  }
  const Json j = ParseJson(text, path);
  if (!j.is_array()) throw Error(path + ": expected a JSON array of samples (or use a .jsonl file)");
  for (size_t i = 0; i < j.size(); ++i) samples.push_back(ParseSample(j[i], path + ": sample " + std::to_string(i)));
  return samples;
}

TokenizedSample TokenizeConversation(const ConversationSample& sample, const Tokenizer& tokenizer,
                                     const std::vector<MediaSlot>& slots, const ChatFormat& format,
                                     const std::vector<int64_t>& image_tokens) {
  std::vector<Turn> turns = sample.turns;
  // Placeholders per slot, checked against the media; media without any placeholder go first.
  for (size_t k = 0; k < slots.size(); ++k) {
    const MediaSlot& slot = slots[k];
    const size_t media = (slot.vision ? sample.images : sample.audios).size();
    size_t found = 0;
    for (const Turn& t : turns) found += Count(t.value, slot.placeholder);
    if (found == 0 && media > 0) {
      auto human = std::find_if(turns.begin(), turns.end(), [](const Turn& t) {
        return t.from == "human" || t.from == "user";
      });
      if (human == turns.end()) throw Error("has " + std::string(slot.vision ? "images" : "audio") +
                                            " but no human turn to put them in");
      std::string prefix;
      for (size_t i = 0; i < media; ++i) prefix += slot.placeholder + "\n";
      human->value = prefix + human->value;
      found = media;
    }
    if (found != media) {
      throw Error(std::to_string(found) + " " + slot.placeholder + " placeholders but " + std::to_string(media) +
                  (slot.vision ? " images" : " audio clips"));
    }
  }
  for (const bool vision : {true, false}) {
    const bool fed = std::any_of(slots.begin(), slots.end(), [&](const MediaSlot& s) { return s.vision == vision; });
    if (!fed && !(vision ? sample.images : sample.audios).empty()) {
      throw Error(std::string("has ") + (vision ? "images" : "audio") + " but the model has no " +
                  (vision ? "vision" : "audio") + " encoder");
    }
  }
  TokenizedSample out;
  const auto append = [&](const std::vector<int64_t>& ids, size_t begin, size_t end, bool loss) {
    if (begin >= end) return;
    for (size_t i = begin; i < end; ++i) {
      if (loss && !out.ids.empty()) out.labels.back() = ids[i];
      out.ids.push_back(ids[i]);
      out.labels.push_back(-100);
    }
    const auto n = static_cast<int64_t>(end - begin);
    if (!out.spans.empty() && out.spans.back().kind == kTextToken) out.spans.back().length += n;
    else out.spans.push_back({kTextToken, n});
  };
  // The text run being gathered: its parts' texts and loss flags.
  std::vector<std::pair<std::string, bool>> run;
  const auto flush = [&] {
    if (run.empty()) return;
    const bool continues = !out.ids.empty();
    std::string text;
    for (const auto& part : run) text += part.first;
    const std::vector<int64_t> ids = tokenizer.Encode(text, continues);
    bool mixed = false;
    for (const auto& part : run) mixed |= part.second != run[0].second;
    size_t begin = 0;
    std::string prefix;
    for (size_t j = 0; j < run.size(); ++j) {
      size_t end = ids.size();
      if (mixed && j + 1 < run.size()) {
        prefix += run[j].first;
        const std::vector<int64_t> upto = tokenizer.Encode(prefix, continues);
        end = 0;
        while (end < ids.size() && end < upto.size() && ids[end] == upto[end]) ++end;
        end = std::max(end, begin);
      }
      append(ids, begin, end, run[j].second);
      begin = end;
    }
    run.clear();
  };
  std::vector<size_t> next_media(slots.size(), 0);
  for (const ChatPart& part : RenderChat(format.chat, turns, tokenizer, format.system_prompt)) {
    if (part.kind == ChatPart::Kind::kBreak) {
      flush();
      continue;
    }
    if (part.kind == ChatPart::Kind::kToken) {
      flush();
      append({part.token}, 0, 1, part.loss);
      continue;
    }
    if (part.loss) {
      for (const MediaSlot& slot : slots) {
        if (Count(part.text, slot.placeholder)) throw Error(slot.placeholder + " in an assistant turn");
      }
    }
    // Split the text at the earliest placeholder of any slot, again and again.
    std::string rest = part.text;
    while (true) {
      size_t at = std::string::npos;
      int slot_of = -1;
      for (size_t k = 0; k < slots.size(); ++k) {
        const size_t p = rest.find(slots[k].placeholder);
        if (p < at) at = p, slot_of = static_cast<int>(k);
      }
      if (slot_of < 0) break;
      if (!part.media_only && at > 0) run.emplace_back(rest.substr(0, at), part.loss);
      flush();
      const MediaSlot& slot = slots[slot_of];
      const std::vector<std::string>& paths = slot.vision ? sample.images : sample.audios;
      const size_t index = next_media[slot_of]++;
      const int64_t tokens = slot.vision && !image_tokens.empty() ? image_tokens.at(index) : slot.tokens;
      out.media.push_back({slot_of, paths[index], out.length()});
      out.spans.push_back({slot_of, tokens});
      out.ids.insert(out.ids.end(), tokens, slot.placeholder_id);
      out.labels.insert(out.labels.end(), tokens, -100);
      rest = rest.substr(at + slot.placeholder.size());
    }
    if (!part.media_only && !rest.empty()) run.emplace_back(rest, part.loss);
  }
  flush();
  return out;
}

}  // namespace cornstarch
