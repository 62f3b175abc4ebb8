#include "cornstarch/data/synthetic_layout.h"

#include "cornstarch/model/model_spec.h"

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

}  // namespace cornstarch
