// Chat templates: how a conversation's turns are laid out for each model family, as a list of parts (text, special
// tokens, run breaks) that data/conversation.cc turns into ids, labels and media spans. Pure layout: no encoding
// happens here, so each template reads as the format it spells.
//
// Text parts that follow each other with no token or break between them form one run, encoded in one call, as
// the tokenizers library encodes the text between two special tokens of a rendered template; a part's loss flag
// then covers the tokens that the part's text produces inside its run. The formats (loss on the parts marked *):
//   llava_v1  <s> [system] "USER: " human  "ASSISTANT:" *answer *</s>        (each piece encoded on its own)
//   vicuna    as llava_v1, with Vicuna's system prompt when the sample has none
//   plain     <s> the human turn's media only, *answer "\n"                  (LLaVA's pretraining captions)
//   llama2    <s>"[INST] <<SYS>>\n" system "\n<</SYS>>\n\n" user " [/INST]" *" " answer " " *</s>, per round
//   llama3    <|begin_of_text|> then per turn <|start_header_id|>role<|end_header_id|>"\n\n" content <|eot_id|>,
//             *content and *<|eot_id|> for the assistant (contents trimmed, as Llama 3's template does)
//   chatml    per turn <|im_start|>role"\n" content<|im_end|>"\n"; *content and *<|im_end|> for the assistant
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cornstarch/plan/config.h"
#include "cornstarch/data/tokenizer.h"

namespace cornstarch {

struct Turn {
  std::string from;  // "system", "human" (or "user"), "gpt" (or "assistant")
  std::string value;
};

struct ChatPart {
  enum class Kind { kText, kToken, kBreak } kind = Kind::kText;
  std::string text;   // kText; may hold media placeholders (human and system turns)
  int64_t token = 0;  // kToken
  bool loss = false;  // the model learns to produce this part
  bool media_only = false;  // kText: only its placeholders count, the rest of the text is dropped (plain)
};

// Throws Error for an unknown role, or naming the tokenizer when it lacks a special token the template needs.
// `system_prompt` stands in for a missing system turn (empty: none).
std::vector<ChatPart> RenderChat(ChatTemplate chat, const std::vector<Turn>& turns, const Tokenizer& tokenizer,
                                 const std::string& system_prompt);

}  // namespace cornstarch
