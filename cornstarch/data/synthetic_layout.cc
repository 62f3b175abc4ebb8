#include "cornstarch/data/synthetic_layout.h"

#include <string>

#include "cornstarch/base/check.h"
#include "cornstarch/plan/model_spec.h"

namespace cornstarch {

SyntheticLayout MakeSyntheticLayout(const ModelConfig& model, const DataConfig& data) {
  SyntheticLayout layout;
  layout.num_encoders = static_cast<int64_t>(model.encoders.size());
  layout.num_classes = data.num_classes;
  for (const EncoderConfig& enc : model.encoders) layout.modality_tokens += EncoderTokens(enc);
  // BOS + prompt + modalities + SEP + answers + joint + EOS
  layout.max_length = 1 + data.max_prompt_tokens + layout.modality_tokens + 1 + layout.num_encoders + 1 + 1;
  layout.first_prompt_token = layout.Joint(data.num_classes);
  return layout;
}

void ValidateSyntheticData(const Config& c) {
  if (c.data.type != DataType::kSynthetic) return;
  auto require = [](bool ok, const std::string& path, const std::string& expected, const std::string& got) {
    if (!ok) throw Error(path + ": " + expected + ", got " + got);
  };
  const auto str = [](int64_t v) { return std::to_string(v); };
  require(!c.model.encoders.empty(), "model.encoders", "the synthetic data needs at least one encoder", "'none'");
  const SyntheticLayout layout = MakeSyntheticLayout(c.model, c.data);
  require(c.model.llm.vocab_size >= layout.MinVocab(), "model.llm.vocab_size",
          "must be at least " + str(layout.MinVocab()) + " for the synthetic data (" + str(layout.num_encoders) +
              " encoders x " + str(c.data.num_classes) + " classes + special and " +
              str(SyntheticLayout::kMinPromptVocab) + " prompt tokens)",
          str(c.model.llm.vocab_size));
  require(c.data.seq_len >= layout.max_length, "data.seq_len",
          "must hold the longest synthetic sample of " + str(layout.max_length) + " tokens (" +
              str(layout.modality_tokens) + " of them modality tokens)",
          str(c.data.seq_len));
}

}  // namespace cornstarch
