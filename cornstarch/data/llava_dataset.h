// LLaVA-style multimodal conversations as training sequences, read as streams: nothing is loaded or tokenized
// at start-up, so a dataset of any size starts at once and memory stays flat.
//
// Global sequence g (step g / B, position p = g % B of its global batch of B) comes from stream p / (B / S) of
// the S = data.streams streams (data/sample_stream.h), as that stream's sequence step * B/S + p % (B/S): the
// slice of a data-parallel rank is exactly its own streams, so each rank reads only its own files, and the data
// order depends on S alone, not on the layout. A stream packs its samples greedily in reading order; where it
// stands is a cursor remembered at every step boundary, so any sequence can be produced again by reading on from
// the nearest remembered cursor (Get stays a pure function of the index), and a checkpoint holds the cursors of
// its step (StreamStates / Resume). Media are decoded when a batch is asked for, outside the stream's lock, so
// several loader threads decode in parallel.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "cornstarch/plan/config.h"
#include "cornstarch/data/conversation.h"
#include "cornstarch/data/dataset.h"
#include "cornstarch/data/image.h"
#include "cornstarch/data/sample_stream.h"

namespace cornstarch {

class LlavaDataset : public Dataset {
 public:
  // Opens the tokenizer and resolves the files (globs); reads none of them. Throws Error naming the field for a
  // pattern matching nothing, data.streams not fitting the dp degree or the batch, or a tokenizer that does not fit.
  LlavaDataset(const Config& config, uint64_t seed, DataRank dp = {});
  ~LlavaDataset() override;

  // A bad sample (placeholders that do not match the media, too long for data.seq_len, a missing file) is an
  // Error naming the file and sample, or with data.on_bad_sample 'skip' it is left out and counted; a file that
  // turns out undecodable when the batch is made becomes padding in that sequence (skip) or an Error.
  Batch Get(int64_t first, int64_t count) const override;
  std::vector<std::vector<int64_t>> StreamStates(int64_t step) const override;
  void Resume(int64_t step, const std::vector<std::vector<int64_t>>& states) override;

  struct Packed {
    std::string where;  // "<file>: sample <i> (id <id>)"
    TokenizedSample tokens;
    std::vector<MediaSource> media;  // per tokens.media entry
  };
  // The samples global sequence g packs, in order.
  std::vector<Packed> Sequence(int64_t g) const;

  int streams() const { return streams_; }
  int64_t skipped() const { return skipped_.load(); }  // bad samples left out, and samples padded at load
  int64_t samples_read() const { return read_.load(); }  // samples read from the files so far, replays included
  const std::vector<StreamSource>& sources() const { return sources_; }
  // Sample `index` of `file` as it would be packed (for cornstarch-data). Throws Error for a bad sample.
  Packed Prepare(const DatasetFile& file, int64_t index) const;

 private:
  struct Stream;
  Stream& StreamOf(int s) const;
  // Moves stream `s` to sequence n (read on from the nearest remembered cursor at or before it); caller locks.
  void Seek(Stream& s, int64_t n) const;
  std::vector<Packed> PackNext(Stream& s) const;  // the stream's next sequence; caller locks

  DataConfig data_;
  std::vector<EncoderConfig> encoders_;
  uint64_t seed_;
  int streams_ = 1;
  int first_mine_ = 0, mine_ = 1;  // this rank's streams
  int64_t per_stream_ = 1;  // sequences of each global batch a stream provides
  int64_t global_batch_ = 1;
  std::vector<StreamSource> sources_;
  std::string field_;  // "data.path" or "data.mix"
  std::unique_ptr<Tokenizer> tokenizer_;
  std::vector<MediaSlot> slots_;
  int packed_ = -1;  // the slot (and encoder) taking images packed (at their own resolution or tiled); -1: none
  ImagePreprocess image_;
  int64_t pad_id_ = 0;
  mutable std::atomic<int64_t> skipped_{0}, read_{0};
  mutable std::mutex mu_;  // guards streams_of_ and the resume point
  mutable std::vector<std::unique_ptr<Stream>> streams_of_;
  int64_t resume_step_ = -1;
  std::vector<std::vector<int64_t>> resume_states_;
};

}  // namespace cornstarch
