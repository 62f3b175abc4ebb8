#include "cornstarch/data/dataset_file.h"

#include <filesystem>
#include <fstream>
#include <iterator>

#include "cornstarch/base/check.h"

namespace cornstarch {

namespace fs = std::filesystem;

namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string ReadBytes(const std::string& file, const std::string& name, uint64_t offset, int64_t size) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw Error(name + ": cannot open");
  if (size < 0) return std::string((std::istreambuf_iterator<char>(in)), {});
  std::string bytes(static_cast<size_t>(size), '\0');
  in.seekg(static_cast<std::streamoff>(offset));
  if (!in.read(bytes.data(), size)) throw Error(name + ": read error");
  return bytes;
}

}  // namespace

std::vector<uint8_t> ReadMedia(const MediaSource& source) {
  const std::string bytes = ReadBytes(source.file, source.name, source.offset, source.size);
  return std::vector<uint8_t>(bytes.begin(), bytes.end());
}

DatasetFile::DatasetFile(const std::string& path, const std::string& media_dir)
    : path_(path), media_dir_(media_dir.empty() ? fs::path(path).parent_path().string() : media_dir) {
  if (!fs::is_regular_file(path)) throw Error(path + ": no such file");
  if (EndsWith(path, ".jsonl")) {
    form_ = Form::kJsonl;
    std::ifstream in(path, std::ios::binary);
    std::string line;
    uint64_t offset = 0;
    for (int64_t number = 1; std::getline(in, line); ++number) {
      if (line.find_first_not_of(" \t\r") != std::string::npos) lines_.push_back({offset, number});
      offset += line.size() + 1;
    }
  } else if (EndsWith(path, ".json")) {
    form_ = Form::kJson;
    whole_ = ParseConversations(ReadBytes(path, path, 0, -1), path);
  } else if (EndsWith(path, ".tar")) {
    form_ = Form::kTar;
    std::ifstream in(path, std::ios::binary);
    tar_ = GroupWebDataset(ReadTarIndex(in, path));
  } else {
    throw Error(path + ": a dataset file must be .json, .jsonl or .tar");
  }
}

int64_t DatasetFile::size() const {
  switch (form_) {
    case Form::kJson: return static_cast<int64_t>(whole_.size());
    case Form::kJsonl: return static_cast<int64_t>(lines_.size());
    case Form::kTar: return static_cast<int64_t>(tar_.size());
  }
  return 0;
}

std::string DatasetFile::Where(int64_t i, const std::string& id) const {
  return path_ + ": sample " + std::to_string(i) + (id.empty() ? "" : " (id " + id + ")");
}

FileSample DatasetFile::Read(int64_t i) const {
  CS_CHECK(i >= 0 && i < size(), "sample ", i, " of ", size());
  FileSample s;
  if (form_ == Form::kTar) {
    const WebDatasetSample& w = tar_[i];
    s.where = Where(i, w.key);
    if (!w.json) throw Error(s.where + ": no .json member with the conversation");
    s.conversation = ParseConversation(ReadBytes(path_, path_, w.json->offset, static_cast<int64_t>(w.json->size)),
                                       s.where);
    s.conversation.id = w.key;
    s.conversation.images.clear();
    s.conversation.audios.clear();
    for (const auto& [members, media, names] :
         {std::tie(w.images, s.images, s.conversation.images), std::tie(w.audios, s.audios, s.conversation.audios)}) {
      for (const TarMember& m : members) {
        media.push_back({path_ + ":" + m.name, path_, m.offset, static_cast<int64_t>(m.size)});
        names.push_back(m.name);
      }
    }
    return s;
  }
  if (form_ == Form::kJson) {
    s.conversation = whole_[i];
    s.where = Where(i, s.conversation.id);
  } else {
    std::ifstream in(path_, std::ios::binary);
    in.seekg(static_cast<std::streamoff>(lines_[i].first));
    std::string line;
    std::getline(in, line);
    const std::string at = path_ + ":" + std::to_string(lines_[i].second) + " (sample " + std::to_string(i) + ")";
    s.conversation = ParseConversation(line, at);
    s.where = Where(i, s.conversation.id);
  }
  for (const auto& [paths, media] :
       {std::tie(s.conversation.images, s.images), std::tie(s.conversation.audios, s.audios)}) {
    for (const std::string& p : paths) {
      const std::string file = (fs::path(media_dir_) / p).string();
      if (!fs::is_regular_file(file)) throw Error(s.where + ": " + file + ": no such file");
      media.push_back({file, file, 0, -1});
    }
  }
  return s;
}

}  // namespace cornstarch
