// WebDataset-style .tar shards: the member index of a tar file, and the samples grouped from it.
//
// A sample is the members sharing a key (the member path up to the first dot of its file name): one `.json`
// conversation plus its media (`.jpg`/`.jpeg`/`.png` images, `.wav`/`.flac` audio), taken in member-name order
// ("k.0.jpg" before "k.1.jpg"). Indexing reads the 512-byte headers only and seeks past the contents, so opening
// a shard of thousands of samples costs milliseconds; contents are read when a sample is. Headers: ustar (with its
// name prefix), GNU long names ('L') and pax path records ('x'); other entry types (directories, links) are
// skipped. No tensors, so the reader is fuzzed on its own (fuzz/webdataset_fuzz.cc): a shard is untrusted input.
#pragma once

#include <cstdint>
#include <istream>
#include <optional>
#include <string>
#include <vector>

namespace cornstarch {

struct TarMember {
  std::string name;
  uint64_t offset = 0;  // of the contents, from the start of the file
  uint64_t size = 0;
};

// The regular files of the tar stream `in` (seekable), in archive order. Throws Error naming `path`: a header
// whose checksum is wrong (not a tar file, or corrupt), a size field that is not a number, contents running past
// the end of the file, an over-long name record.
std::vector<TarMember> ReadTarIndex(std::istream& in, const std::string& path);

struct WebDatasetSample {
  std::string key;
  std::optional<TarMember> json;       // the conversation; missing is a bad sample, reported when it is read
  std::vector<TarMember> images, audios;
};

// Samples in order of their key's first member; members of other kinds (".txt", ".cls", ...) are ignored.
std::vector<WebDatasetSample> GroupWebDataset(const std::vector<TarMember>& members);

}  // namespace cornstarch
