// What the model sees, one line per token: id, the piece as the vocabulary spells it, the label (or that the
// position is ignored), the RoPE position, what the position's mask word lets it attend to, and the media instance a
// placeholder token stands for. `cornstarch-data` prints it for a sample or a packed sequence, so a chat template or
// a tokenizer can be checked against the model card before a run. Pure: the caller turns tensors into rows.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cornstarch/data/conversation.h"
#include "cornstarch/data/tokenizer.h"

namespace cornstarch {

struct TokenRow {
  int64_t id = 0;
  int64_t label = -100;  // target of this position (already shifted); -100: no loss
  int64_t position = 0;  // RoPE position
  int64_t word = 0;      // bitfield mask word (plan/bitfield_mask.h)
  std::string media;     // placeholder tokens: the encoder and instance they stand for; else empty
};

// One sample as TokenizeConversation laid it out, unpacked: positions count from 0, mask words as packing would
// give this sample alone. `encoders` names the media slots (config order).
std::vector<TokenRow> SampleRows(const TokenizedSample& sample, const std::vector<std::string>& encoders);

// The table, with a header line. Without a tokenizer (synthetic data) the piece columns stay empty.
std::string TokenTable(const std::vector<TokenRow>& rows, const Tokenizer* tokenizer);

// A mask word in words: "pad", "text g1,g3" (causal over the text and media of groups 1 and 3), "media g2".
std::string DescribeMaskWord(int64_t word);

}  // namespace cornstarch
