// LLaVA-style conversation samples: reading them from JSON/JSONL, and turning one into tokens, labels and the
// spans of its media placeholders, laid out by a chat template (data/chat_template.h).
//
// Each placeholder is expanded to its encoder's token count of placeholder ids and ends the text run around it,
// as an added token would. A run's text is encoded in one call; when its parts differ in loss, each token belongs
// to the part whose text first produces it: the run's tokens are compared with the encoding of the run's text up
// to each part's end, so a merge across a part boundary goes to the later part and nothing is counted twice.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cornstarch/data/chat_template.h"
#include "cornstarch/data/tokenizer.h"
#include "cornstarch/plan/bitfield_mask.h"
#include "cornstarch/plan/config.h"

namespace cornstarch {

struct ConversationSample {
  std::string id;
  std::vector<std::string> images, audios;  // paths as written in the file
  std::vector<Turn> turns;
};

// Reads a .json file holding an array of samples, or a .jsonl file with one sample per line. Throws Error naming
// the file and the sample (or line) for malformed JSON or a sample without a list of conversations.
std::vector<ConversationSample> ReadConversations(const std::string& path);
// The same over the file's text; `path` names it in errors and its extension picks the form.
std::vector<ConversationSample> ParseConversations(const std::string& text, const std::string& path);
// One sample: a JSON object as text (a .jsonl line, a WebDataset .json member); `where` names it in errors.
ConversationSample ParseConversation(const std::string& text, const std::string& where);

// How an encoder's media appear in the text.
struct MediaSlot {
  bool vision = true;           // takes the sample's images (else its audios)
  std::string placeholder;      // e.g. "<image>"
  int64_t placeholder_id = 0;   // token id written over the expanded placeholder
  int64_t tokens = 0;           // tokens one instance contributes to the LLM sequence
};

struct MediaRef {
  int encoder = 0;          // index into the slots (and the model's encoders)
  std::string path;         // as in the sample
  int64_t position = 0;     // first placeholder token in the sample
};

struct TokenizedSample {
  std::vector<int64_t> ids;
  std::vector<int64_t> labels;  // target of position t (already shifted), -100 where no loss
  std::vector<MaskSpan> spans;  // text and one span per media instance
  std::vector<MediaRef> media;  // in order of position
  int64_t length() const { return static_cast<int64_t>(ids.size()); }
};

struct ChatFormat {
  ChatTemplate chat = ChatTemplate::kLlavaV1;
  std::string system_prompt;  // for samples without a system turn; empty: none
};

// Throws Error for a sample whose placeholders do not match its media (a bad sample the caller may skip), an
// unknown role, or a placeholder in an assistant turn. A sample whose media have no placeholder at all gets them
// (one per line) in front of its first human turn, as LLaVA does.
// `image_tokens`, when given, holds the tokens of each of sample.images (images at their own resolution): an
// image's placeholder expands to its count instead of its slot's.
TokenizedSample TokenizeConversation(const ConversationSample& sample, const Tokenizer& tokenizer,
                                     const std::vector<MediaSlot>& slots, const ChatFormat& format = {},
                                     const std::vector<int64_t>& image_tokens = {});

}  // namespace cornstarch
