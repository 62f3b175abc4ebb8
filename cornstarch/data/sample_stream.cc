#include "cornstarch/data/sample_stream.h"

#include <glob.h>

#include <algorithm>

#include "cornstarch/base/check.h"
#include "cornstarch/base/random.h"
#include "cornstarch/plan/packing.h"

namespace cornstarch {

std::vector<std::string> ResolveFiles(const std::vector<std::string>& patterns, const std::string& field) {
  std::vector<std::string> files;
  for (const std::string& p : patterns) {
    if (p.find_first_of("*?[") == std::string::npos) {
      files.push_back(p);  // a plain path: DatasetFile says what is wrong with it when it is opened
      continue;
    }
    glob_t g{};
    const int rc = glob(p.c_str(), 0, nullptr, &g);
    std::vector<std::string> matched(g.gl_pathv, g.gl_pathv + (rc == 0 ? g.gl_pathc : 0));
    globfree(&g);
    if (matched.empty()) throw Error(field + ": '" + p + "' matches no file");
    std::sort(matched.begin(), matched.end());
    files.insert(files.end(), matched.begin(), matched.end());
  }
  return files;
}

std::vector<int64_t> StreamCursor::Encode() const {
  std::vector<int64_t> v = {draws};
  for (const Position& p : sources) v.insert(v.end(), {p.epoch, p.file, p.sample});
  return v;
}

SampleStream::SampleStream(std::vector<StreamSource> sources, int stream, int streams, uint64_t seed, bool shuffle,
                           const std::string& field)
    : sources_(std::move(sources)), stream_(stream), seed_(seed), shuffle_(shuffle), field_(field) {
  CS_CHECK(stream >= 0 && stream < streams && !sources_.empty(), "stream ", stream, " of ", streams);
  for (const StreamSource& s : sources_) {
    const auto files = static_cast<int64_t>(s.files.size());
    std::vector<Part> parts;
    if (files >= streams) {
      for (int64_t f = stream; f < files; f += streams) parts.push_back({f, 0, 1});
    } else {
      if (files == 0 || streams % files != 0) {
        throw Error(field + ": " + std::to_string(files) + " files cannot be dealt to data.streams=" +
                    std::to_string(streams) + " streams: give at least as many files, or a number of files that "
                    "divides the streams");
      }
      parts.push_back({stream % files, stream / files, streams / files});
    }
    parts_.push_back(parts);
    total_weight_ += s.weight;
  }
  open_.resize(sources_.size());
  open_file_.assign(sources_.size(), -1);
  order_.resize(sources_.size(), {{-1, -1}, {}});
}

StreamCursor SampleStream::Start() const {
  StreamCursor c;
  c.sources.resize(sources_.size());
  return c;
}

StreamCursor SampleStream::Decode(const std::vector<int64_t>& encoded) const {
  if (encoded.size() != 1 + 3 * sources_.size() ||
      std::any_of(encoded.begin(), encoded.end(), [](int64_t v) { return v < 0; })) {
    throw Error(field_ + ": the checkpoint's data position does not fit these datasets (" +
                std::to_string(sources_.size()) + " of them): were the data files changed?");
  }
  StreamCursor c;
  c.draws = encoded[0];
  for (size_t s = 0; s < sources_.size(); ++s) {
    c.sources.push_back({encoded[1 + 3 * s], encoded[2 + 3 * s], encoded[3 + 3 * s]});
    if (c.sources.back().file >= static_cast<int64_t>(parts_[s].size())) {
      throw Error(field_ + ": the checkpoint's data position names file " + std::to_string(c.sources.back().file) +
                  " of a stream that has " + std::to_string(parts_[s].size()) + ": were the data files changed?");
    }
  }
  return c;
}

int SampleStream::Draw(int64_t draw) const {
  if (sources_.size() == 1) return 0;
  const uint64_t bits =
      MixSeed(MixSeed(seed_, 0x6d6978ULL + static_cast<uint64_t>(stream_)), static_cast<uint64_t>(draw));
  double u = static_cast<double>(bits >> 11) * 0x1.0p-53 * total_weight_;
  for (size_t s = 0; s + 1 < sources_.size(); ++s) {
    if (u < sources_[s].weight) return static_cast<int>(s);
    u -= sources_[s].weight;
  }
  return static_cast<int>(sources_.size()) - 1;
}

const DatasetFile& SampleStream::Open(int source, int64_t file) {
  if (open_file_[source] != file) {
    open_[source].reset();  // the previous file's index goes before the next one is read
    open_[source] = std::make_shared<const DatasetFile>(sources_[source].files[file], sources_[source].media_dir);
    open_file_[source] = file;
  }
  return *open_[source];
}

int64_t SampleStream::PartSamples(const DatasetFile& f, const Part& p) const {
  return f.size() > p.residue ? (f.size() - p.residue + p.modulus - 1) / p.modulus : 0;
}

SampleStream::Ref SampleStream::Next(StreamCursor& cursor) {
  const int s = Draw(cursor.draws);
  const std::vector<Part>& parts = parts_[s];
  const auto num_parts = static_cast<int64_t>(parts.size());
  StreamCursor::Position& at = cursor.sources[s];
  // Past empty files (and the end of a file or epoch) to the next sample; a whole epoch without one is an error.
  for (int64_t tried = 0;; ++tried) {
    if (tried > num_parts) {
      throw Error(field_ + ": no samples for stream " + std::to_string(stream_) + " in " +
                  std::to_string(num_parts) + " files, the first " + sources_[s].files[parts[0].file]);
    }
    const uint64_t source_seed = MixSeed(seed_, 0x73747265616dULL + (static_cast<uint64_t>(s) << 32) + stream_);
    const std::vector<int64_t> files = EpochOrder(num_parts, source_seed, at.epoch, shuffle_);
    const Part& part = parts[files[at.file]];
    const DatasetFile& f = Open(s, part.file);
    const int64_t n = PartSamples(f, part);
    if (at.sample < n) {
      auto& [key, order] = order_[s];
      if (key != std::make_pair(at.epoch, files[at.file])) {
        const uint64_t file_seed = MixSeed(source_seed, static_cast<uint64_t>(part.file));
        order = EpochOrder(n, file_seed, at.epoch, shuffle_);
        key = {at.epoch, files[at.file]};
      }
      Ref ref{open_[s], part.residue + part.modulus * order[at.sample]};
      ++cursor.draws;
      if (++at.sample == n) {
        at.sample = 0;
        if (++at.file == num_parts) at = {at.epoch + 1, 0, 0};
      }
      return ref;
    }
    at.sample = 0;
    if (++at.file == num_parts) at = {at.epoch + 1, 0, 0};
  }
}

}  // namespace cornstarch
