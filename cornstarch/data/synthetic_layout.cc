#include "cornstarch/data/synthetic_layout.h"

#include <string>

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

namespace {

// The checks of one data section (`p`: "data" or "eval.data") that needs the synthetic layout.
void ValidateSection(const Config& c, const DataConfig& d, const std::string& p) {
  if (d.type != DataType::kSynthetic) return;
  const auto str = [](int64_t v) { return std::to_string(v); };
  RequireConfig(!c.model.encoders.empty(), "model.encoders", "the synthetic data needs at least one encoder", "'none'");
  const SyntheticLayout layout = MakeSyntheticLayout(c.model, d);
  RequireConfig(c.model.llm.vocab_size >= layout.MinVocab(), "model.llm.vocab_size",
                "must be at least " + str(layout.MinVocab()) + " for the synthetic data (" +
                    str(layout.num_encoders) + " encoders x " + str(d.num_classes) + " classes + special and " +
                    str(SyntheticLayout::kMinPromptVocab) + " prompt tokens)",
                str(c.model.llm.vocab_size));
  RequireConfig(d.seq_len >= layout.max_length, p + ".seq_len",
                "must hold the longest synthetic sample of " + str(layout.max_length) + " tokens (" +
                    str(layout.modality_tokens) + " of them modality tokens)",
                str(d.seq_len));
}

}  // namespace

void ValidateSyntheticData(const Config& c) {
  ValidateSection(c, c.data, "data");
  if (c.eval.enabled()) ValidateSection(c, c.eval.data, "eval.data");
}

}  // namespace cornstarch
