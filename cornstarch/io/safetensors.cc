#include "cornstarch/io/safetensors.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "cornstarch/base/check.h"

namespace cornstarch {

namespace {

// The format's own limit on the header, which also bounds what a corrupt length can make us parse.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct DtypeInfo {
  const char* name;
  int bytes;
  at::ScalarType torch;  // Undefined: this LibTorch has no such type
};

const std::vector<DtypeInfo>& Dtypes() {
  static const std::vector<DtypeInfo> table = {
      {"BOOL", 1, at::kBool},           {"U8", 1, at::kByte},    {"I8", 1, at::kChar},
      {"F8_E5M2", 1, at::ScalarType::Undefined}, {"F8_E4M3", 1, at::ScalarType::Undefined},
      {"I16", 2, at::kShort},           {"U16", 2, at::ScalarType::Undefined},
      {"F16", 2, at::kHalf},            {"BF16", 2, at::kBFloat16},
      {"I32", 4, at::kInt},             {"U32", 4, at::ScalarType::Undefined},
      {"F32", 4, at::kFloat},           {"F64", 8, at::kDouble},
      {"I64", 8, at::kLong},            {"U64", 8, at::ScalarType::Undefined}};
  return table;
}

const DtypeInfo* FindDtype(const std::string& name) {
  for (const DtypeInfo& d : Dtypes()) {
    if (name == d.name) return &d;
  }
  return nullptr;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string Errno() { return std::strerror(errno); }

// A file written under a temporary name and renamed over `path` only once complete and on disk.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path) : path_(std::move(path)), tmp_(path_ + ".tmp." + std::to_string(getpid())) {
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) throw Error(path_ + ": cannot create " + tmp_ + ": " + Errno());
  }
  ~AtomicFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(tmp_.c_str());
  }
  void Write(const void* data, size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) throw Error(path_ + ": write failed: " + Errno());
      p += w, n -= static_cast<size_t>(w);
    }
  }
  void Commit() {
    if (::fsync(fd_) != 0) throw Error(path_ + ": fsync failed: " + Errno());
    ::close(fd_);
    fd_ = -1;
    if (::rename(tmp_.c_str(), path_.c_str()) != 0) throw Error(path_ + ": rename failed: " + Errno());
    committed_ = true;
    // The rename itself must survive a crash: sync the directory entry.
    const size_t slash = path_.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : path_.substr(0, std::max<size_t>(slash, 1));
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      ::fsync(dfd);
      ::close(dfd);
    }
  }

 private:
  std::string path_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace

SafetensorsHeader ParseSafetensorsHeader(const uint8_t* data, uint64_t size, const std::string& path) {
  if (size < 8) {
    throw Error(path + ": not a safetensors file: " + std::to_string(size) + " bytes, less than the 8-byte header "
                "length");
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | data[i];
  if (n > size - 8) {
    throw Error(path + ": header length " + std::to_string(n) + " runs past the end of the file (" +
                std::to_string(size) + " bytes); the file is truncated or not safetensors");
  }
  if (n > kMaxHeaderBytes) throw Error(path + ": header length " + std::to_string(n) + " exceeds the format's 100 MB");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(data + 8, data + 8 + n);
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": the header is not valid UTF-8 JSON: " + e.what());
  }
  if (!j.is_object()) throw Error(path + ": the header must be a JSON object");
  SafetensorsHeader h;
  h.data_start = 8 + n;
  const uint64_t buffer = size - h.data_start;
  for (const auto& [name, v] : j.items()) {
    const std::string where = path + ": tensor '" + name + "'";
    if (name == "__metadata__") {
      if (!v.is_object()) throw Error(path + ": __metadata__ must map strings to strings");
      for (const auto& [k, mv] : v.items()) {
        if (!mv.is_string()) throw Error(path + ": __metadata__ value of '" + k + "' must be a string");
        h.metadata[k] = mv.get<std::string>();
      }
      continue;
    }
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets")) {
      throw Error(where + ": expected an object with dtype, shape and data_offsets");
    }
    SafetensorsEntry e;
    if (!v["dtype"].is_string()) throw Error(where + ": dtype must be a string");
    e.dtype = v["dtype"].get<std::string>();
    const DtypeInfo* info = FindDtype(e.dtype);
    if (!info) throw Error(where + ": unknown dtype '" + e.dtype + "'");
    if (!v["shape"].is_array()) throw Error(where + ": shape must be an array of non-negative integers");
    uint64_t numel = 1;
    for (const auto& d : v["shape"]) {
      if (!d.is_number_unsigned()) throw Error(where + ": shape must be an array of non-negative integers");
      const uint64_t dim = d.get<uint64_t>();
      if (dim != 0 && numel > (uint64_t{1} << 62) / dim) throw Error(where + ": shape overflows");
      numel *= dim;
      e.shape.push_back(static_cast<int64_t>(dim));
    }
    const auto& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
      throw Error(where + ": data_offsets must be [begin, end] with non-negative integers");
    }
    e.begin = off[0].get<uint64_t>();
    e.end = off[1].get<uint64_t>();
    const std::string range = "[" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "]";
    if (e.begin > e.end) throw Error(where + ": data_offsets " + range + " end before they begin");
    if (e.end > buffer) {
      throw Error(where + ": data_offsets " + range + " run past the end of the data (" + std::to_string(buffer) +
                  " bytes); the file is truncated");
    }
    if (e.end - e.begin != numel * static_cast<uint64_t>(info->bytes)) {
      throw Error(where + ": data_offsets " + range + " hold " + std::to_string(e.end - e.begin) + " bytes, but " +
                  e.dtype + " " + ShapeString(e.shape) + " needs " + std::to_string(numel * info->bytes));
    }
    h.tensors[name] = e;
  }
  // The offsets must tile the buffer exactly: no overlaps, no holes, nothing after the last tensor.
  std::vector<std::pair<const std::string*, const SafetensorsEntry*>> order;
  for (const auto& [name, e] : h.tensors) order.emplace_back(&name, &e);
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return a.second->begin != b.second->begin ? a.second->begin < b.second->begin : a.second->end < b.second->end;
  });
  uint64_t at = 0;
  const std::string* previous = nullptr;
  for (const auto& [name, e] : order) {
    if (e->begin < at) throw Error(path + ": tensors '" + *previous + "' and '" + *name + "' overlap");
    if (e->begin > at) {
      throw Error(path + ": bytes [" + std::to_string(at) + ", " + std::to_string(e->begin) +
                  ") of the data belong to no tensor (before '" + *name + "')");
    }
    at = e->end;
    previous = name;
  }
  if (at != buffer) {
    throw Error(path + ": the last " + std::to_string(buffer - at) + " bytes of the data belong to no tensor");
  }
  return h;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(path + ": cannot open: " + Errno());
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    throw Error(path + ": cannot stat: " + Errno());
  }
  size_ = static_cast<uint64_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED) throw Error(path + ": cannot map: " + Errno());
    data_ = static_cast<const uint8_t*>(p);
  } else {
    ::close(fd);
  }
  try {
    header_ = ParseSafetensorsHeader(data_, size_, path);
  } catch (...) {
    if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

at::Tensor SafetensorsFile::Get(const std::string& name) const {
  const auto it = header_.tensors.find(name);
  if (it == header_.tensors.end()) throw Error(path_ + ": no tensor '" + name + "'");
  const SafetensorsEntry& e = it->second;
  const DtypeInfo* info = FindDtype(e.dtype);
  if (info->torch == at::ScalarType::Undefined) {
    throw Error(path_ + ": tensor '" + name + "': dtype " + e.dtype + " has no LibTorch equivalent here");
  }
  // Copied rather than wrapped: offsets need not be aligned for the dtype, and the mapping outlives no one.
  at::Tensor t = at::empty(e.shape, at::TensorOptions().dtype(info->torch));
  if (e.end > e.begin) std::memcpy(t.data_ptr(), data_ + header_.data_start + e.begin, e.end - e.begin);
  return t;
}

void WriteSafetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<at::Tensor> data;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    CS_CHECK(name != "__metadata__" && !header.contains(name), "tensor name '", name, "' is reserved or repeated");
    const DtypeInfo* info = nullptr;
    for (const DtypeInfo& d : Dtypes()) {
      if (d.torch == tensor.scalar_type()) info = &d;
    }
    CS_CHECK(info, "no safetensors dtype for ", tensor.scalar_type(), " (tensor ", name, ")");
    data.push_back(tensor.detach().to(at::kCPU).contiguous());
    const uint64_t bytes = static_cast<uint64_t>(data.back().numel()) * info->bytes;
    header[name] = {{"dtype", info->name}, {"shape", tensor.sizes().vec()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keeps the data buffer 8-byte aligned
  uint8_t length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));
  AtomicFile out(path);
  out.Write(length, 8);
  out.Write(text.data(), text.size());
  for (const at::Tensor& t : data) out.Write(t.data_ptr(), static_cast<size_t>(t.numel()) * t.element_size());
  out.Commit();
}

void WriteFileAtomically(const std::string& path, const std::string& bytes) {
  AtomicFile out(path);
  out.Write(bytes.data(), bytes.size());
  out.Commit();
}

}  // namespace cornstarch
