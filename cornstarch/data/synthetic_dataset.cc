#include "cornstarch/data/synthetic_dataset.h"

#include <torch/torch.h>

#include <random>

#include "cornstarch/plan/bitfield_mask.h"
#include "cornstarch/plan/model_spec.h"
#include "cornstarch/base/random.h"

namespace cornstarch {

namespace {

constexpr uint64_t kPrototypeStream = 0x70726f746fULL;
constexpr uint64_t kSampleStream = 0x73616d706c65ULL;
constexpr uint64_t kEvalSampleStream = 0x6576616c73ULL;

void FillNormal(float* out, int64_t n, std::mt19937_64& rng, double std) {
  std::normal_distribution<float> normal(0.0f, static_cast<float>(std));
  for (int64_t i = 0; i < n; ++i) out[i] = normal(rng);
}

}  // namespace

SyntheticDataset::SyntheticDataset(const ModelConfig& model, const DataConfig& data, uint64_t seed, DataRole role)
    : model_(model),
      data_(data),
      seed_(seed),
      sample_stream_(role == DataRole::kEval ? kEvalSampleStream : kSampleStream),
      layout_(MakeSyntheticLayout(model, data)) {
  for (size_t k = 0; k < model.encoders.size(); ++k) {
    std::vector<int64_t> shape = KindOf(model.encoders[k].type).input_shape(model.encoders[k]);
    shape.insert(shape.begin(), data.num_classes);
    torch::Tensor proto = torch::empty(shape, torch::kFloat);
    std::mt19937_64 rng(MixSeed(seed, kPrototypeStream + k));
    FillNormal(proto.data_ptr<float>(), proto.numel(), rng, 1.0);
    prototypes_.push_back(proto);
  }
}

Batch SyntheticDataset::Get(int64_t first, int64_t count) const {
  const int64_t s = data_.seq_len;
  const int64_t num_enc = layout_.num_encoders;
  torch::Tensor ids = torch::full({count, s}, SyntheticLayout::kPad, torch::kLong);
  torch::Tensor labels = torch::full({count, s}, -100, torch::kLong);
  torch::Tensor words = torch::zeros({count, s}, torch::kLong);
  Batch batch;
  batch.positions = torch::arange(s, torch::kLong).unsqueeze(0).expand({count, s}).contiguous();
  std::vector<torch::Tensor> inputs, positions;
  for (const EncoderConfig& enc : model_.encoders) {
    std::vector<int64_t> shape = KindOf(enc.type).input_shape(enc);
    shape.insert(shape.begin(), count);
    inputs.push_back(torch::zeros(shape, torch::kFloat));
    positions.push_back(torch::empty({count * EncoderTokens(enc)}, torch::kLong));
  }
  auto* id = ids.data_ptr<int64_t>();
  auto* label = labels.data_ptr<int64_t>();
  auto* word = words.data_ptr<int64_t>();
  std::uniform_int_distribution<int64_t> cls(0, data_.num_classes - 1);
  std::uniform_int_distribution<int64_t> prompt_len(data_.min_prompt_tokens, data_.max_prompt_tokens);
  std::uniform_int_distribution<int64_t> prompt_tok(layout_.first_prompt_token, model_.llm.vocab_size - 1);
  for (int64_t b = 0; b < count; ++b) {
    std::mt19937_64 rng(MixSeed(seed_, MixSeed(sample_stream_, static_cast<uint64_t>(first + b))));
    std::vector<int64_t> tokens = {SyntheticLayout::kBos};
    const int64_t n_prompt = prompt_len(rng);
    for (int64_t t = 0; t < n_prompt; ++t) tokens.push_back(prompt_tok(rng));
    std::vector<MaskSpan> spans = {{kTextToken, 1 + n_prompt}};
    std::vector<int64_t> classes(num_enc);
    int64_t class_sum = 0;
    for (int64_t k = 0; k < num_enc; ++k) {
      classes[k] = cls(rng);
      class_sum += classes[k];
      const int64_t n_tok = EncoderTokens(model_.encoders[k]);
      auto* pos = positions[k].data_ptr<int64_t>() + b * n_tok;
      for (int64_t t = 0; t < n_tok; ++t) {
        pos[t] = b * s + static_cast<int64_t>(tokens.size());
        tokens.push_back(layout_.Placeholder(k));
      }
      spans.push_back({static_cast<int>(k), n_tok});
      torch::Tensor x = inputs[k][b];
      if (!data_.zero_modality_inputs) {
        FillNormal(x.data_ptr<float>(), x.numel(), rng, data_.noise_std);
        x.add_(prototypes_[k][classes[k]]);
      }
    }
    tokens.push_back(SyntheticLayout::kSep);
    const int64_t first_target = static_cast<int64_t>(tokens.size());
    for (int64_t k = 0; k < num_enc; ++k) tokens.push_back(layout_.Answer(k, classes[k]));
    tokens.push_back(layout_.Joint(class_sum % data_.num_classes));
    tokens.push_back(SyntheticLayout::kEos);
    spans.push_back({kTextToken, static_cast<int64_t>(tokens.size()) - first_target + 1});
    const std::vector<int64_t> sample_words = BuildMaskWords(spans, static_cast<int>(num_enc));
    for (size_t t = 0; t < tokens.size(); ++t) {
      id[b * s + t] = tokens[t];
      word[b * s + t] = sample_words[t];
      if (static_cast<int64_t>(t) >= first_target) label[b * s + t - 1] = tokens[t];
    }
  }
  batch.input_ids = ids;
  batch.labels = labels;
  batch.mask_words = words;
  for (int64_t k = 0; k < num_enc; ++k) {
    const EncoderConfig& e = model_.encoders[k];
    if (!PackedTower(e)) {
      batch.modalities.push_back({inputs[k], positions[k]});
      continue;
    }
    // Every image an image_size square, its views packed as real images' are.
    const std::vector<PatchGrid> square = ImageViews(e.image_size, e.image_size, e);
    std::vector<PatchGrid> grids;
    for (int64_t b = 0; b < count; ++b) grids.insert(grids.end(), square.begin(), square.end());
    batch.modalities.push_back(PackPatches(inputs[k].reshape({-1, inputs[k].size(2)}), grids));
    batch.modalities.back().positions = positions[k];
  }
  return batch;
}

}  // namespace cornstarch
