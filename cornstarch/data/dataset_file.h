// One file of a llava dataset, opened to read its samples by index: a .json array (parsed whole when opened), a
// .jsonl file (line offsets indexed when opened, a line parsed when its sample is read) or a WebDataset .tar
// shard (headers indexed when opened, data/webdataset.h). Opening costs one pass over the file at most and keeps
// an offset or a few member names per sample (.jsonl, .tar); nothing is tokenized or decoded here. No tensors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cornstarch/data/conversation.h"
#include "cornstarch/data/webdataset.h"

namespace cornstarch {

// Where a media file's bytes are: a file of its own, or a member of a tar shard.
struct MediaSource {
  std::string name;   // for errors: the path, or "<shard>:<member>"
  std::string file;
  uint64_t offset = 0;
  int64_t size = -1;  // bytes at offset; -1: the whole file
};

// Reads the bytes. Throws Error naming the source when it is missing or unreadable.
std::vector<uint8_t> ReadMedia(const MediaSource& source);

struct FileSample {
  std::string where;  // "<file>: sample <i> (id <id>)", the prefix of its error messages
  ConversationSample conversation;
  std::vector<MediaSource> images, audios;
};

class DatasetFile {
 public:
  // Relative media paths of .json/.jsonl samples start from `media_dir` (empty: the file's directory). Throws
  // Error naming the file: missing, an extension other than .json/.jsonl/.tar, malformed (.json), not a tar file.
  DatasetFile(const std::string& path, const std::string& media_dir);

  const std::string& path() const { return path_; }
  int64_t size() const;
  // Sample i. Throws Error starting with its `where` for a bad sample: malformed JSON, no conversation, a media
  // file that does not exist. Thread-safe.
  FileSample Read(int64_t i) const;

 private:
  enum class Form { kJson, kJsonl, kTar };
  std::string Where(int64_t i, const std::string& id) const;

  std::string path_, media_dir_;
  Form form_;
  std::vector<ConversationSample> whole_;                    // .json
  std::vector<std::pair<uint64_t, int64_t>> lines_;          // .jsonl: offset and line number of each sample
  std::vector<WebDatasetSample> tar_;                        // .tar
};

}  // namespace cornstarch
