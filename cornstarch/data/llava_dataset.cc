#include "cornstarch/data/llava_dataset.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>

#include "cornstarch/base/check.h"
#include "cornstarch/data/audio.h"
#include "cornstarch/data/audio_file.h"
#include "cornstarch/plan/bitfield_mask.h"
#include "cornstarch/plan/image_grid.h"
#include "cornstarch/plan/model_spec.h"
#include "cornstarch/plan/packing.h"

namespace cornstarch {

namespace {

// Remembered cursors: every step boundary of the last kRecentSteps steps, and every kSparseSteps-th before, so a
// request for an old sequence reads on from at most kSparseSteps steps before it.
constexpr int64_t kRecentSteps = 64;
constexpr int64_t kSparseSteps = 256;

}  // namespace

struct LlavaDataset::Stream {
  std::unique_ptr<SampleStream> reader;
  StreamCursor cursor;        // before sequence `next`
  int64_t next = 0;
  int64_t produced = 0;       // sequences produced so far at most: bad samples are counted once
  std::map<int64_t, StreamCursor> memo;  // cursors at sequences that start a step
  std::optional<std::pair<StreamCursor, Packed>> pending;  // the sample at `cursor` that did not fit the last one
  std::mutex mu;
};

LlavaDataset::LlavaDataset(const Config& config, uint64_t seed, DataRank dp)
    : data_(config.data), encoders_(config.model.encoders), seed_(seed) {
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
  for (const EncoderConfig& e : encoders_) {
    MediaSlot slot;
    slot.vision = KindOf(e.type).modality == InputModality::kImage;
    slot.placeholder = slot.vision ? data_.image_token : data_.audio_token;
    slot.placeholder_id = tokenizer_->PlaceholderId(slot.placeholder);
    slot.tokens = EncoderTokens(e);
    slots_.push_back(slot);
    if (slot.vision && PackedTower(e) && packed_ < 0) packed_ = static_cast<int>(slots_.size()) - 1;
    if (slot.vision) {
      image_ = PresetPreprocess(data_.image_preset, e.image_size);
      if (!data_.image_mean.empty()) std::copy_n(data_.image_mean.begin(), 3, image_.mean.begin());
      if (!data_.image_std.empty()) std::copy_n(data_.image_std.begin(), 3, image_.std.begin());
    }
  }

  field_ = data_.mix.empty() ? "data.path" : "data.mix";
  if (data_.mix.empty()) {
    sources_.push_back({ResolveFiles(data_.path, "data.path"), 1.0, data_.media_dir});
  } else {
    for (size_t i = 0; i < data_.mix.size(); ++i) {
      const DataSource& m = data_.mix[i];
      const std::string at = "data.mix[" + std::to_string(i) + "]";
      sources_.push_back(
          {ResolveFiles(m.path, at + ".path"), m.weight, m.media_dir.empty() ? data_.media_dir : m.media_dir});
    }
  }
  global_batch_ = config.train.global_batch_size;
  streams_ = static_cast<int>(data_.streams > 0 ? data_.streams : dp.size);
  if (streams_ % dp.size != 0 || global_batch_ % streams_ != 0) {
    throw Error("data.streams: " + std::to_string(streams_) + " streams must be a multiple of the dp degree (" +
                std::to_string(dp.size) + ") and divide train.global_batch_size=" + std::to_string(global_batch_));
  }
  per_stream_ = global_batch_ / streams_;
  streams_of_.resize(streams_);
  int64_t files = 0;
  for (const StreamSource& s : sources_) files += static_cast<int64_t>(s.files.size());
  mine_ = streams_ / dp.size;
  first_mine_ = dp.rank * mine_;
  spdlog::info("data: {} files in {} dataset{}, {} streams; dp rank {} reads stream{} {}{}", files, sources_.size(),
               sources_.size() == 1 ? "" : "s", streams_, dp.rank, mine_ == 1 ? "" : "s", first_mine_,
               mine_ == 1 ? "" : "-" + std::to_string(first_mine_ + mine_ - 1));
  for (int s = first_mine_; s < first_mine_ + mine_; ++s) StreamOf(s);  // dealing errors show at start
}

LlavaDataset::~LlavaDataset() = default;

LlavaDataset::Stream& LlavaDataset::StreamOf(int s) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::unique_ptr<Stream>& stream = streams_of_[s];
  if (!stream) {
    auto fresh = std::make_unique<Stream>();
    fresh->reader = std::make_unique<SampleStream>(sources_, s, streams_, seed_, data_.shuffle, field_);
    fresh->cursor = fresh->reader->Start();
    fresh->memo[0] = fresh->cursor;
    if (resume_step_ >= 0) fresh->memo[resume_step_ * per_stream_] = fresh->reader->Decode(resume_states_[s]);
    stream = std::move(fresh);
  }
  return *stream;
}

LlavaDataset::Packed LlavaDataset::Prepare(const DatasetFile& file, int64_t index) const {
  FileSample f = file.Read(index);
  Packed p;
  p.where = f.where;
  try {
    // At their own resolution or tiled, an image's placeholders depend on its size: read from its header here, so
    // packing knows every sample's length before any pixel is decoded.
    std::vector<int64_t> image_tokens;
    if (packed_ >= 0) {
      for (const MediaSource& m : f.images) {
        const Image size = ReadImageSize(ReadMedia(m), m.name);
        image_tokens.push_back(ImageTokens(size.width, size.height, encoders_[packed_]));
      }
    }
    p.tokens = TokenizeConversation(f.conversation, *tokenizer_, slots_, {data_.chat_template, data_.system_prompt},
                                    image_tokens);
  } catch (const Error& e) {
    throw Error(f.where + ": " + e.what());
  }
  if (p.tokens.length() > data_.seq_len) {
    throw Error(f.where + ": " + std::to_string(p.tokens.length()) + " tokens, more than data.seq_len=" +
                std::to_string(data_.seq_len));
  }
  for (const MediaRef& m : p.tokens.media) {
    const bool vision = slots_[m.encoder].vision;
    const std::vector<std::string>& names = vision ? f.conversation.images : f.conversation.audios;
    const size_t k = std::find(names.begin(), names.end(), m.path) - names.begin();
    p.media.push_back((vision ? f.images : f.audios).at(k));
  }
  return p;
}

std::vector<LlavaDataset::Packed> LlavaDataset::PackNext(Stream& s) const {
  std::vector<Packed> sequence;
  int64_t tokens = 0;
  int groups = 0;
  const bool counts = s.next >= s.produced;  // not a replay
  while (true) {
    Packed item;
    StreamCursor after = s.cursor;
    if (s.pending && s.pending->first == s.cursor) {
      item = std::move(s.pending->second);
      after = s.pending->first;
      s.reader->Next(after);  // past it, without reading it again
    } else {
      const SampleStream::Ref ref = s.reader->Next(after);
      ++read_;
      try {
        item = Prepare(*ref.file, ref.index);
      } catch (const Error& e) {
        if (data_.on_bad_sample == BadSamplePolicy::kError) {
          throw Error(std::string(e.what()) + " (data.on_bad_sample: skip leaves such samples out)");
        }
        if (counts) {
          spdlog::warn("data: skipping {}", e.what());
          ++skipped_;
        }
        s.cursor = after;
        continue;
      }
    }
    s.pending.reset();
    const PackItem pack{item.tokens.length(), MaskGroupsNeeded(item.tokens.spans, false)};
    if (!JoinsSequence(tokens, groups, pack, data_.seq_len, data_.pack)) {
      s.pending.emplace(s.cursor, std::move(item));  // starts the next sequence
      break;
    }
    tokens += pack.length;
    groups += pack.groups;
    sequence.push_back(std::move(item));
    s.cursor = after;
  }
  ++s.next;
  s.produced = std::max(s.produced, s.next);
  if (s.next % per_stream_ == 0) {
    s.memo[s.next] = s.cursor;
    // Forget the cursors no request is likely to need: all but the recent ones and a sparse few.
    const int64_t step = s.next / per_stream_ - kRecentSteps;
    if (step > 0 && step % kSparseSteps != 0) s.memo.erase(step * per_stream_);
  }
  return sequence;
}

void LlavaDataset::Seek(Stream& s, int64_t n) const {
  if (n < s.next) {
    auto it = std::prev(s.memo.upper_bound(n));
    s.next = it->first;
    s.cursor = it->second;
  }
  while (s.next < n) PackNext(s);
}

std::vector<LlavaDataset::Packed> LlavaDataset::Sequence(int64_t g) const {
  CS_CHECK(g >= 0, "sequence ", g);
  const int64_t p = g % global_batch_;
  Stream& s = StreamOf(static_cast<int>(p / per_stream_));
  std::lock_guard<std::mutex> lock(s.mu);
  Seek(s, g / global_batch_ * per_stream_ + p % per_stream_);
  return PackNext(s);
}

std::vector<std::vector<int64_t>> LlavaDataset::StreamStates(int64_t step) const {
  std::vector<std::vector<int64_t>> states;
  for (int i = first_mine_; i < first_mine_ + mine_; ++i) {
    Stream& s = StreamOf(i);
    std::lock_guard<std::mutex> lock(s.mu);
    const int64_t n = step * per_stream_;
    const auto it = s.memo.find(n);
    if (it != s.memo.end()) {
      states.push_back(it->second.Encode());
    } else {
      Seek(s, n);
      states.push_back(s.cursor.Encode());
    }
  }
  return states;
}

void LlavaDataset::Resume(int64_t step, const std::vector<std::vector<int64_t>>& states) {
  if (states.empty()) return;  // a checkpoint of a run without streams: read on from the start
  if (static_cast<int>(states.size()) != streams_) {
    throw Error("data.streams: the checkpoint holds " + std::to_string(states.size()) + " data streams, this run has " +
                std::to_string(streams_) + "; resume with data.streams=" + std::to_string(states.size()));
  }
  std::lock_guard<std::mutex> lock(mu_);
  resume_step_ = step;
  resume_states_ = states;
  for (int i = 0; i < streams_; ++i) {
    if (Stream* s = streams_of_[i].get()) {
      s->memo[step * per_stream_] = s->reader->Decode(states[i]);
      s->next = step * per_stream_;
      s->produced = s->next;
      s->cursor = s->memo[s->next];
      s->pending.reset();
    }
  }
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
  std::vector<PatchGrid> grids;  // of the packed tower's views

  // `views`: set to a packed tower's views of an image, whose patches it returns one after another.
  const auto load = [&](const MediaRef& m, const MediaSource& source, std::vector<PatchGrid>& views) {
    const EncoderConfig& e = encoders_[m.encoder];
    const std::vector<uint8_t> bytes = ReadMedia(source);
    if (KindOf(e.type).modality == InputModality::kImage) {
      const Image image = DecodeImage(bytes, source.name);
      if (!PackedTower(e)) {
        std::vector<float> pixels = PreprocessImage(image, image_);
        return torch::from_blob(pixels.data(), {3, image_.size, image_.size}, torch::kFloat).clone();
      }
      views = ImageViews(image.width, image.height, e);
      std::vector<std::vector<float>> pixels;
      if (e.dynamic_resolution) {
        pixels.push_back(PreprocessImageAt(image, image_, static_cast<int>(views[0].cols * e.patch_size),
                                           static_cast<int>(views[0].rows * e.patch_size)));
      } else {
        const PatchGrid tiles = AnyresTiles(image.width, image.height, e);
        pixels = PreprocessAnyres(image, image_, static_cast<int>(tiles.rows), static_cast<int>(tiles.cols));
      }
      // [3, rows * P, cols * P] -> one row per patch, each (channel, pixel row, pixel column) as the patch
      // convolution's weight is laid out.
      const int64_t p = e.patch_size;
      std::vector<torch::Tensor> patches;
      for (size_t i = 0; i < views.size(); ++i) {
        const PatchGrid& g = views[i];
        patches.push_back(torch::from_blob(pixels[i].data(), {3, g.rows, p, g.cols, p}, torch::kFloat)
                              .permute({1, 3, 0, 2, 4})
                              .reshape({g.patches(), 3 * p * p}));
      }
      return torch::cat(patches);
    }
    const Audio audio = DecodeAudio(bytes, source.name);
    return WhisperLogMel(Resample(audio.samples, audio.sample_rate, kWhisperSampleRate),
                         static_cast<int>(e.num_mel_bins), e.num_frames);
  };

  for (int64_t b = 0; b < count; ++b) {
    std::vector<std::vector<MaskSpan>> docs;
    int64_t offset = 0;
    for (const Packed& p : Sequence(first + b)) {
      const TokenizedSample& t = p.tokens;
      std::vector<torch::Tensor> media;
      std::vector<std::vector<PatchGrid>> media_views(t.media.size());
      try {
        for (size_t j = 0; j < t.media.size(); ++j) media.push_back(load(t.media[j], p.media[j], media_views[j]));
      } catch (const Error& e) {
        const std::string what = p.where + ": " + e.what();
        if (data_.on_bad_sample == BadSamplePolicy::kError) throw Error(what);
        spdlog::warn("data: skipping {}", what);
        ++skipped_;
        docs.push_back({{kPadToken, t.length()}});  // its tokens stay padding
        offset += t.length();
        continue;
      }
      for (size_t j = 0; j < t.media.size(); ++j) {
        const MediaRef& m = t.media[j];
        inputs[m.encoder].push_back(media[j]);
        // A packed tower's image: as many tokens as its views' patches, each view an image of its own.
        const int64_t tokens = m.encoder == packed_ ? media[j].size(0) : EncoderTokens(encoders_[m.encoder]);
        grids.insert(grids.end(), media_views[j].begin(), media_views[j].end());
        for (int64_t k = 0; k < tokens; ++k) {
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
    const torch::Tensor positions = torch::tensor(feature_positions[k], torch::kLong);
    if (k == packed_) {
      batch.modalities.push_back(PackPatches(torch::cat(inputs[k]), grids));
      batch.modalities.back().positions = positions;
      continue;
    }
    std::vector<int64_t> shape = KindOf(e.type).input_shape(e);
    shape.insert(shape.begin(), 0);
    torch::Tensor x = inputs[k].empty() ? torch::zeros(shape, torch::kFloat) : torch::stack(inputs[k]);
    batch.modalities.push_back({x, positions});
  }
  return batch;
}

}  // namespace cornstarch
