// Token layout of the synthetic multimodal task. Pure: the checks of vocab_size and seq_len against it run before
// any tensor is built.
//
// A sample is: BOS, random prompt tokens, for each encoder k its placeholder token repeated EncoderTokens(k)
// times, SEP, one answer token per encoder naming that instance's class, a joint token naming the sum of all
// classes modulo num_classes, EOS, then padding. Loss is on the answer, joint and EOS tokens only.
#pragma once

#include <cstdint>

#include "cornstarch/plan/config.h"

namespace cornstarch {

struct SyntheticLayout {
  static constexpr int64_t kPad = 0;
  static constexpr int64_t kBos = 1;
  static constexpr int64_t kEos = 2;
  static constexpr int64_t kSep = 3;
  // Fewest distinct prompt tokens that keep prompts random; part of the minimum vocabulary.
  static constexpr int64_t kMinPromptVocab = 8;

  int64_t num_encoders = 0;
  int64_t num_classes = 0;
  int64_t modality_tokens = 0;  // sum of EncoderTokens over the encoders
  int64_t max_length = 0;       // longest sample, before padding
  int64_t first_prompt_token = 0;

  int64_t Placeholder(int64_t encoder) const { return 4 + encoder; }
  int64_t Answer(int64_t encoder, int64_t cls) const { return 4 + num_encoders + encoder * num_classes + cls; }
  int64_t Joint(int64_t cls) const { return 4 + num_encoders * (1 + num_classes) + cls; }
  int64_t MinVocab() const { return first_prompt_token + kMinPromptVocab; }
};

SyntheticLayout MakeSyntheticLayout(const ModelConfig& model, const DataConfig& data);

// The config checks that need the layout (at least one encoder, vocab_size and seq_len large enough), for `data`
// and, when evaluation is on, `eval.data`. Throws
// Error("<key.path>: <what was expected>, got <value>") as Validate(Config) does; a no-op for other data types.
void ValidateSyntheticData(const Config& config);

}  // namespace cornstarch
