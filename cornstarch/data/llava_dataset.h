// LLaVA-style multimodal conversations as training sequences: tokenized once at start-up, packed per epoch in a
// seeded order, media decoded and preprocessed when a batch is asked for.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cornstarch/plan/config.h"
#include "cornstarch/data/conversation.h"
#include "cornstarch/data/dataset.h"
#include "cornstarch/data/image.h"
#include "cornstarch/plan/packing.h"

namespace cornstarch {

class LlavaDataset : public Dataset {
 public:
  // Reads and tokenizes every sample and checks that its media files exist. Bad samples (placeholders that do not
  // match the media, too long for data.seq_len, a missing file) are an Error naming the file and sample index, or
  // skipped and counted when data.on_bad_sample is 'skip'.
  LlavaDataset(const Config& config, uint64_t seed);
  ~LlavaDataset() override;

  // Sequence g of the endless stream of epochs. A file that turns out undecodable is an Error, or (skip) its
  // sample becomes padding in that sequence and is counted.
  Batch Get(int64_t first, int64_t count) const override;

  int64_t num_samples() const { return static_cast<int64_t>(samples_.size()); }  // kept
  int64_t skipped_at_start() const { return skipped_at_start_; }
  int64_t skipped_on_load() const { return skipped_on_load_.load(); }
  // Which samples sequence g packs (indices into the kept samples), and the epoch it belongs to.
  std::vector<int64_t> SequenceSamples(int64_t g, int64_t* epoch = nullptr) const;
  const TokenizedSample& sample(int64_t i) const { return samples_[i]; }

 private:
  // "<data.path>: sample <index in the file> (id <id>)", the prefix of every bad-sample message.
  std::string Where(int64_t index, const std::string& id) const;

  struct Kept {
    int64_t index;   // in the file
    std::string id;
  };

  DataConfig data_;
  std::vector<EncoderConfig> encoders_;
  std::string media_dir_;
  uint64_t seed_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::vector<TokenizedSample> samples_;
  std::vector<PackItem> items_;  // tokens and mask groups of each sample, for packing every epoch
  std::vector<Kept> kept_;
  ImagePreprocess image_;
  int64_t pad_id_ = 0;
  int64_t skipped_at_start_ = 0;
  mutable std::atomic<int64_t> skipped_on_load_{0};
  // Epoch plans as they are needed: sequences of sample indices, and the first global index of each epoch.
  mutable std::mutex mu_;
  mutable std::vector<std::vector<std::vector<int64_t>>> epochs_;
  mutable std::vector<int64_t> epoch_first_;
};

}  // namespace cornstarch
