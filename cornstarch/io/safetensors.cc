#include "cornstarch/io/safetensors.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "cornstarch/base/check.h"

namespace cornstarch {

namespace {

// The LibTorch type of a safetensors dtype; Undefined where this LibTorch has none.
at::ScalarType TorchType(const std::string& dtype) {
  static const std::map<std::string, at::ScalarType> types = {
      {"BOOL", at::kBool}, {"U8", at::kByte},  {"I8", at::kChar},      {"I16", at::kShort}, {"F16", at::kHalf},
      {"BF16", at::kBFloat16}, {"I32", at::kInt}, {"F32", at::kFloat}, {"F64", at::kDouble}, {"I64", at::kLong}};
  const auto it = types.find(dtype);
  return it == types.end() ? at::ScalarType::Undefined : it->second;
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

const SafetensorsEntry& SafetensorsFile::Entry(const std::string& name, at::ScalarType* type) const {
  const auto it = header_.tensors.find(name);
  if (it == header_.tensors.end()) throw Error(path_ + ": no tensor '" + name + "'");
  *type = TorchType(it->second.dtype);
  if (*type == at::ScalarType::Undefined) {
    throw Error(path_ + ": tensor '" + name + "': dtype " + it->second.dtype + " has no LibTorch equivalent here");
  }
  return it->second;
}

at::Tensor SafetensorsFile::Get(const std::string& name) const {
  at::ScalarType type;
  const SafetensorsEntry& e = Entry(name, &type);
  // Copied rather than wrapped: offsets need not be aligned for the dtype, and the mapping outlives no one.
  at::Tensor t = at::empty(e.shape, at::TensorOptions().dtype(type));
  if (e.end > e.begin) std::memcpy(t.data_ptr(), data_ + header_.data_start + e.begin, e.end - e.begin);
  return t;
}

at::Tensor SafetensorsFile::GetSlice(const std::string& name, int dim, int64_t begin, int64_t length) const {
  at::ScalarType type;
  const SafetensorsEntry& e = Entry(name, &type);
  const auto rank = static_cast<int>(e.shape.size());
  CS_CHECK((dim == 0 || dim == 1) && dim < rank && begin >= 0 && length >= 0 && begin + length <= e.shape[dim],
           path_, ": tensor '", name, "' of shape ", c10::IntArrayRef(e.shape), " has no elements [", begin, ", ",
           begin + length, ") along dim ", dim);
  std::vector<int64_t> shape = e.shape;
  shape[dim] = length;
  at::Tensor t = at::empty(shape, at::TensorOptions().dtype(type));
  // Row-major: `outer` runs of [e.shape[dim] x inner] elements, of which each keeps [begin, begin + length) x inner.
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < dim; ++d) outer *= e.shape[d];
  for (int d = dim + 1; d < rank; ++d) inner *= e.shape[d];
  const auto bytes = static_cast<int64_t>(c10::elementSize(type));
  const int64_t run = length * inner * bytes, stride = e.shape[dim] * inner * bytes;
  const uint8_t* src = data_ + header_.data_start + e.begin + begin * inner * bytes;
  auto* dst = static_cast<uint8_t*>(t.data_ptr());
  for (int64_t o = 0; o < outer && run > 0; ++o) std::memcpy(dst + o * run, src + o * stride, run);
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
    const std::vector<std::string>& dtypes = SafetensorsDtypes();
    const auto dtype = std::find_if(dtypes.begin(), dtypes.end(),
                                    [&](const std::string& d) { return TorchType(d) == tensor.scalar_type(); });
    CS_CHECK(dtype != dtypes.end(), "no safetensors dtype for ", tensor.scalar_type(), " (tensor ", name, ")");
    data.push_back(tensor.detach().to(at::kCPU).contiguous());
    const uint64_t bytes = static_cast<uint64_t>(data.back().numel()) * SafetensorsDtypeBytes(*dtype);
    header[name] = {{"dtype", *dtype}, {"shape", tensor.sizes().vec()}, {"data_offsets", {offset, offset + bytes}}};
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
