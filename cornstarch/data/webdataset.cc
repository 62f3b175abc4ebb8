#include "cornstarch/data/webdataset.h"

#include <algorithm>
#include <array>
#include <map>

#include "cornstarch/base/check.h"

namespace cornstarch {

namespace {

constexpr uint64_t kBlock = 512;
constexpr uint64_t kMaxNameRecord = 1 << 16;  // a GNU long name or pax header larger than this is not a name

std::string Field(const std::array<char, kBlock>& h, size_t at, size_t len) {
  const char* begin = h.data() + at;
  return std::string(begin, std::find(begin, begin + len, '\0'));
}

// A numeric header field: octal text (NUL/space padded), or GNU's base-256 form (high bit of the first byte set).
bool Number(const std::array<char, kBlock>& h, size_t at, size_t len, uint64_t& value) {
  value = 0;
  const auto* f = reinterpret_cast<const unsigned char*>(h.data() + at);
  if (f[0] & 0x80) {
    if (f[0] != 0x80) return false;  // negative, or a value past 64 bits
    for (size_t i = 1; i < len; ++i) {
      if (value >> 56) return false;
      value = value << 8 | f[i];
    }
    return true;
  }
  size_t i = 0;
  while (i < len && f[i] == ' ') ++i;
  bool digits = false;
  for (; i < len && f[i] >= '0' && f[i] <= '7'; ++i, digits = true) {
    if (value >> 61) return false;
    value = value << 3 | (f[i] - '0');
  }
  for (; i < len; ++i) {
    if (f[i] != ' ' && f[i] != '\0') return false;
  }
  return digits;
}

bool Checksum(const std::array<char, kBlock>& h) {
  uint64_t stored = 0;
  if (!Number(h, 148, 8, stored)) return false;
  uint64_t sum = 0;
  for (size_t i = 0; i < kBlock; ++i) sum += (i >= 148 && i < 156) ? ' ' : static_cast<unsigned char>(h[i]);
  return sum == stored;
}

// The "path" record of a pax extended header ("<length> path=<value>\n" records), or "".
std::string PaxPath(const std::string& records) {
  std::string path;
  size_t at = 0;
  while (at < records.size()) {
    const size_t space = records.find(' ', at);
    if (space == std::string::npos) break;
    uint64_t len = 0;
    for (size_t i = at; i < space; ++i) {
      if (records[i] < '0' || records[i] > '9' || len > records.size()) return path;
      len = len * 10 + (records[i] - '0');
    }
    if (len <= space - at + 1 || at + len > records.size()) break;
    const std::string record = records.substr(space + 1, at + len - space - 2);  // without the newline
    if (record.compare(0, 5, "path=") == 0) path = record.substr(5);
    at += len;
  }
  return path;
}

// "dir/k.0.jpg" -> key "dir/k", extension "0.jpg": the key ends at the first dot of the file name.
std::pair<std::string, std::string> SplitKey(const std::string& name) {
  const size_t slash = name.rfind('/');
  const size_t dot = name.find('.', slash == std::string::npos ? 0 : slash + 1);
  if (dot == std::string::npos) return {name, ""};
  return {name.substr(0, dot), name.substr(dot + 1)};
}

// The kind a member's extension names, by its last part: "0.jpg" is an image.
enum class Kind { kJson, kImage, kAudio, kOther };
Kind KindOf(const std::string& extension) {
  std::string last = extension.substr(extension.rfind('.') == std::string::npos ? 0 : extension.rfind('.') + 1);
  std::transform(last.begin(), last.end(), last.begin(), [](unsigned char c) { return std::tolower(c); });
  if (last == "json") return Kind::kJson;
  if (last == "jpg" || last == "jpeg" || last == "png") return Kind::kImage;
  if (last == "wav" || last == "flac") return Kind::kAudio;
  return Kind::kOther;
}

}  // namespace

std::vector<TarMember> ReadTarIndex(std::istream& in, const std::string& path) {
  in.seekg(0, std::ios::end);
  const auto end = static_cast<uint64_t>(std::max<std::streamoff>(in.tellg(), 0));
  std::vector<TarMember> members;
  std::string long_name;  // from a preceding 'L' or 'x' entry
  uint64_t at = 0;
  std::array<char, kBlock> h;
  while (at + kBlock <= end) {
    in.clear();
    in.seekg(static_cast<std::streamoff>(at));
    if (!in.read(h.data(), kBlock)) throw Error(path + ": read error at byte " + std::to_string(at));
    if (std::all_of(h.begin(), h.end(), [](char c) { return c == '\0'; })) break;  // end-of-archive block
    const std::string where = path + ": tar header at byte " + std::to_string(at);
    if (!Checksum(h)) throw Error(where + ": bad checksum (not a tar file, or corrupt)");
    uint64_t size = 0;
    if (!Number(h, 124, 12, size)) throw Error(where + ": size field is not a number");
    const uint64_t contents = at + kBlock;
    if (size > end - contents) {
      throw Error(where + ": " + std::to_string(size) + " bytes of contents run past the end of the file");
    }
    const char type = h[156];
    if (type == 'L' || type == 'x') {
      if (size > kMaxNameRecord) throw Error(where + ": name record of " + std::to_string(size) + " bytes");
      std::string record(size, '\0');
      if (!in.read(record.data(), static_cast<std::streamsize>(size))) throw Error(where + ": read error");
      long_name = type == 'L' ? record.substr(0, record.find('\0')) : PaxPath(record);
    } else if (type == '0' || type == '\0' || type == '7') {
      std::string name = long_name;
      if (name.empty()) {
        name = Field(h, 0, 100);
        const std::string prefix = Field(h, 345, 155);
        if (Field(h, 257, 5) == "ustar" && !prefix.empty()) name = prefix + "/" + name;
      }
      if (name.compare(0, 2, "./") == 0) name = name.substr(2);
      members.push_back({name, contents, size});
      long_name.clear();
    } else {
      long_name.clear();  // directories, links, global pax headers: nothing to read
    }
    at = contents + (size + kBlock - 1) / kBlock * kBlock;
  }
  return members;
}

std::vector<WebDatasetSample> GroupWebDataset(const std::vector<TarMember>& members) {
  std::vector<WebDatasetSample> samples;
  std::map<std::string, size_t> index;
  for (const TarMember& m : members) {
    const auto [key, extension] = SplitKey(m.name);
    const Kind kind = KindOf(extension);
    if (kind == Kind::kOther) continue;
    const auto [it, fresh] = index.emplace(key, samples.size());
    if (fresh) samples.push_back({key, std::nullopt, {}, {}});
    WebDatasetSample& s = samples[it->second];
    if (kind == Kind::kJson) {
      s.json = m;
    } else {
      (kind == Kind::kImage ? s.images : s.audios).push_back(m);
    }
  }
  const auto by_name = [](const TarMember& a, const TarMember& b) { return a.name < b.name; };
  for (WebDatasetSample& s : samples) {
    std::sort(s.images.begin(), s.images.end(), by_name);
    std::sort(s.audios.begin(), s.audios.end(), by_name);
  }
  return samples;
}

}  // namespace cornstarch
