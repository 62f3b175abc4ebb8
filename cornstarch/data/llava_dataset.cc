#include "cornstarch/data/llava_dataset.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>

#include "cornstarch/plan/bitfield_mask.h"
#include "cornstarch/data/audio.h"
#include "cornstarch/plan/model_spec.h"
#include "cornstarch/base/check.h"

namespace cornstarch {

namespace fs = std::filesystem;

LlavaDataset::LlavaDataset(const Config& config, uint64_t seed)
    : data_(config.data), encoders_(config.model.encoders), seed_(seed) {
  media_dir_ = data_.media_dir.empty() ? fs::path(data_.path).parent_path().string() : data_.media_dir;
  try {
    tokenizer_ = OpenTokenizer(data_.tokenizer);
  } catch (const Error& e) {
    throw Error("data.tokenizer: " + std::string(e.what()));
  }
  if (tokenizer_->vocab_size() > config.model.llm.vocab_size) {
    throw Error("model.llm.vocab_size: must be at least " + std::to_string(tokenizer_->vocab_size()) +
                ", the vocabulary of data.tokenizer " + data_.tokenizer + ", got " +
                std::to_string(config.model.llm.vocab_size));
  }
  pad_id_ = std::max<int64_t>(tokenizer_->eos(), 0);  // padding is never attended to nor learned
  std::vector<MediaSlot> slots;
  for (const EncoderConfig& e : encoders_) {
    MediaSlot slot;
    slot.vision = KindOf(e.type).modality == InputModality::kImage;
    slot.placeholder = slot.vision ? data_.image_token : data_.audio_token;
    slot.placeholder_id = tokenizer_->PlaceholderId(slot.placeholder);
    slot.tokens = EncoderTokens(e);
    slots.push_back(slot);
    if (slot.vision) {
      image_ = PresetPreprocess(data_.image_preset, e.image_size);
      if (!data_.image_mean.empty()) std::copy_n(data_.image_mean.begin(), 3, image_.mean.begin());
      if (!data_.image_std.empty()) std::copy_n(data_.image_std.begin(), 3, image_.std.begin());
    }
  }

  const std::vector<ConversationSample> raw = ReadConversations(data_.path);
  for (size_t i = 0; i < raw.size(); ++i) {
    try {
      TokenizedSample t = TokenizeConversation(raw[i], *tokenizer_, slots, {data_.chat_template, data_.system_prompt});
      if (t.length() > data_.seq_len) {
        throw Error(std::to_string(t.length()) + " tokens, more than data.seq_len=" + std::to_string(data_.seq_len));
      }
      for (const MediaRef& m : t.media) {
        const fs::path file = fs::path(media_dir_) / m.path;
        if (!fs::is_regular_file(file)) throw Error(file.string() + ": no such file");
      }
      items_.push_back({t.length(), MaskGroupsNeeded(t.spans, false)});
      samples_.push_back(std::move(t));
      kept_.push_back({static_cast<int64_t>(i), raw[i].id});
    } catch (const Error& e) {
      const std::string what = Where(static_cast<int64_t>(i), raw[i].id) + ": " + e.what();
      if (data_.on_bad_sample == BadSamplePolicy::kError) throw Error(what + " (data.on_bad_sample: skip leaves such samples out)");
      spdlog::warn("data: skipping {}", what);
      ++skipped_at_start_;
    }
  }
  if (samples_.empty()) {
    throw Error(data_.path + ": no usable samples (" + std::to_string(skipped_at_start_) + " skipped)");
  }
  SequenceSamples(0);  // plans the first epoch
  spdlog::info("data: {} samples from {} ({} skipped), {} sequences of {} tokens in the first epoch", num_samples(),
               data_.path, skipped_at_start_, epochs_[0].size(), data_.seq_len);
}

LlavaDataset::~LlavaDataset() = default;

std::string LlavaDataset::Where(int64_t index, const std::string& id) const {
  return data_.path + ": sample " + std::to_string(index) + (id.empty() ? "" : " (id " + id + ")");
}

std::vector<int64_t> LlavaDataset::SequenceSamples(int64_t g, int64_t* epoch) const {
  CS_CHECK(g >= 0, "sequence ", g);
  std::lock_guard<std::mutex> lock(mu_);
  while (epoch_first_.empty() || epoch_first_.back() + static_cast<int64_t>(epochs_.back().size()) <= g) {
    const int64_t e = static_cast<int64_t>(epochs_.size());
    epoch_first_.push_back(e == 0 ? 0 : epoch_first_.back() + static_cast<int64_t>(epochs_.back().size()));
    epochs_.push_back(PackSequences(EpochOrder(num_samples(), seed_, e, data_.shuffle), items_, data_.seq_len,
                                    data_.pack));
  }
  const int64_t e = std::upper_bound(epoch_first_.begin(), epoch_first_.end(), g) - epoch_first_.begin() - 1;
  if (epoch) *epoch = e;
  return epochs_[e][g - epoch_first_[e]];
}

Batch LlavaDataset::Get(int64_t first, int64_t count) const {
  const int64_t s = data_.seq_len;
  const int num_enc = static_cast<int>(encoders_.size());
  torch::Tensor ids = torch::full({count, s}, pad_id_, torch::kLong);
  torch::Tensor labels = torch::full({count, s}, -100, torch::kLong);
  torch::Tensor positions = torch::zeros({count, s}, torch::kLong);
  torch::Tensor words = torch::zeros({count, s}, torch::kLong);
  auto* id = ids.data_ptr<int64_t>();
  auto* label = labels.data_ptr<int64_t>();
  auto* pos = positions.data_ptr<int64_t>();
  auto* word = words.data_ptr<int64_t>();
  std::vector<std::vector<torch::Tensor>> inputs(num_enc);
  std::vector<std::vector<int64_t>> feature_positions(num_enc);

  const auto load = [&](const MediaRef& m) {
    const EncoderConfig& e = encoders_[m.encoder];
    const std::string file = (fs::path(media_dir_) / m.path).string();
    if (KindOf(e.type).modality == InputModality::kImage) {
      std::vector<float> pixels = PreprocessImage(DecodeImage(file), image_);
      return torch::from_blob(pixels.data(), {3, image_.size, image_.size}, torch::kFloat).clone();
    }
    const Audio audio = ReadAudio(file);
    return WhisperLogMel(Resample(audio.samples, audio.sample_rate, kWhisperSampleRate),
                         static_cast<int>(e.num_mel_bins), e.num_frames);
  };

  for (int64_t b = 0; b < count; ++b) {
    std::vector<std::vector<MaskSpan>> docs;
    int64_t offset = 0;
    for (int64_t i : SequenceSamples(first + b)) {
      const TokenizedSample& t = samples_[i];
      std::vector<torch::Tensor> media;
      try {
        for (const MediaRef& m : t.media) media.push_back(load(m));
      } catch (const Error& e) {
        const std::string what = Where(kept_[i].index, kept_[i].id) + ": " + e.what();
        if (data_.on_bad_sample == BadSamplePolicy::kError) throw Error(what);
        spdlog::warn("data: skipping {}", what);
        ++skipped_on_load_;
        docs.push_back({{kPadToken, t.length()}});  // its tokens stay padding
        offset += t.length();
        continue;
      }
      for (size_t j = 0; j < t.media.size(); ++j) {
        const MediaRef& m = t.media[j];
        inputs[m.encoder].push_back(media[j]);
        for (int64_t k = 0; k < EncoderTokens(encoders_[m.encoder]); ++k) {
          feature_positions[m.encoder].push_back(b * s + offset + m.position + k);
        }
      }
      const int64_t row = b * s + offset;
      std::copy(t.ids.begin(), t.ids.end(), id + row);
      std::copy(t.labels.begin(), t.labels.end(), label + row);
      for (int64_t k = 0; k < t.length(); ++k) pos[row + k] = k;  // positions restart in every packed sample
      docs.push_back(t.spans);
      offset += t.length();
    }
    const std::vector<int64_t> row_words = BuildPackedMaskWords(docs, num_enc);
    std::copy(row_words.begin(), row_words.end(), word + b * s);
  }

  Batch batch;
  batch.input_ids = ids;
  batch.labels = labels;
  batch.positions = positions;
  batch.mask_words = words;
  for (int k = 0; k < num_enc; ++k) {
    const EncoderConfig& e = encoders_[k];
    std::vector<int64_t> shape = KindOf(e.type).input_shape(e);
    shape.insert(shape.begin(), 0);
    torch::Tensor x = inputs[k].empty() ? torch::zeros(shape, torch::kFloat) : torch::stack(inputs[k]);
    batch.modalities.push_back({x, torch::tensor(feature_positions[k], torch::kLong)});
  }
  return batch;
}

}  // namespace cornstarch
