// The order one stream of a llava dataset reads its samples in, as a small cursor that a checkpoint can hold.
//
// The files of every dataset (data.path, or each of data.mix) are dealt to data.streams streams round-robin in
// sorted order; with fewer files than streams each file is split by sample index among streams / files of them.
// A stream reads its files one at a time: every epoch in a seeded order of files, and within a file in a seeded
// order of its samples, so only the open file's index is in memory and a resumed stream reopens just one file.
// With a mix, each sample is drawn from one dataset with probability proportional to its weight, by a counter-
// based draw (seed, stream, draw number), so the cursor alone says what comes next. No tensors.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cornstarch/data/dataset_file.h"

namespace cornstarch {

struct StreamSource {
  std::vector<std::string> files;  // globs resolved, sorted
  double weight = 1.0;
  std::string media_dir;
};

// The files `patterns` names: globs expanded (sorted), plain paths kept. Throws Error naming `field` for a
// pattern that matches nothing.
std::vector<std::string> ResolveFiles(const std::vector<std::string>& patterns, const std::string& field);

// Where a stream is: the draws made so far and, per dataset, its epoch, the position in that epoch's file order
// and the position in the current file's sample order.
struct StreamCursor {
  struct Position {
    int64_t epoch = 0, file = 0, sample = 0;
  };
  int64_t draws = 0;
  std::vector<Position> sources;

  std::vector<int64_t> Encode() const;  // 1 + 3 x sources integers
  bool operator==(const StreamCursor& o) const { return Encode() == o.Encode(); }
};

class SampleStream {
 public:
  // Throws Error naming `field` when a dataset cannot be dealt to `streams` streams (fewer files than streams
  // that do not divide them evenly).
  SampleStream(std::vector<StreamSource> sources, int stream, int streams, uint64_t seed, bool shuffle,
               const std::string& field);

  StreamCursor Start() const;
  // The cursor `encoded` (from Encode) after checking that it fits this stream's files; Error otherwise.
  StreamCursor Decode(const std::vector<int64_t>& encoded) const;

  struct Ref {
    std::shared_ptr<const DatasetFile> file;
    int64_t index = 0;  // sample of the file
  };
  // The sample at `cursor`, which moves past it. Opens the file it is in (the previous file of that dataset is
  // closed). Throws Error when a dataset has no sample at all for this stream. Not thread-safe.
  Ref Next(StreamCursor& cursor);

 private:
  struct Part {  // a file as this stream sees it: its samples residue, residue + modulus, ...
    int64_t file = 0, residue = 0, modulus = 1;
  };
  int Draw(int64_t draw) const;
  const DatasetFile& Open(int source, int64_t file);
  int64_t PartSamples(const DatasetFile& f, const Part& p) const;

  std::vector<StreamSource> sources_;
  std::vector<std::vector<Part>> parts_;  // per dataset
  int stream_;
  uint64_t seed_;
  bool shuffle_;
  std::string field_;
  double total_weight_ = 0;
  std::vector<std::shared_ptr<const DatasetFile>> open_;  // per dataset, the file last opened
  std::vector<int64_t> open_file_;
  // Per dataset, the sample order of (epoch, part) last used.
  std::vector<std::pair<std::pair<int64_t, int64_t>, std::vector<int64_t>>> order_;
};

}  // namespace cornstarch
