#include "cornstarch/train/tensorboard.h"

#include <chrono>
#include <cstring>
#include <filesystem>
#include <vector>

#include "cornstarch/base/check.h"

namespace cornstarch {

namespace {

double WallTime() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void Varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}

template <class T>
void Fixed(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // little-endian hosts only, like the rest of the file formats here
  out.append(b, sizeof(T));
}

void Bytes(std::string& out, int field, const std::string& bytes) {
  Varint(out, static_cast<uint64_t>(field) << 3 | 2);
  Varint(out, bytes.size());
  out += bytes;
}

// Event{wall_time = 1 (double), step = 2 (int64)} plus whatever fields `rest` holds.
std::string Event(int64_t step, const std::string& rest) {
  std::string e;
  Varint(e, 1 << 3 | 1);
  Fixed(e, WallTime());
  Varint(e, 2 << 3 | 0);
  Varint(e, static_cast<uint64_t>(step));
  return e + rest;
}

uint32_t Masked(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

}  // namespace

uint32_t Crc32c(const char* data, size_t n) {
  static const auto table = [] {
    std::vector<uint32_t> t(256);
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t crc = 0xffffffffu;
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ static_cast<uint8_t>(data[i])) & 0xff] ^ (crc >> 8);
  return crc ^ 0xffffffffu;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  if (dir.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  path_ = (std::filesystem::path(dir) / ("events.out.tfevents." + std::to_string(static_cast<int64_t>(WallTime())) +
                                         ".cornstarch")).string();
  out_.open(path_, std::ios::binary | std::ios::trunc);
  if (!out_) throw Error("logging.tensorboard_dir: cannot write '" + path_ + "'");
  std::string version;
  Bytes(version, 3, "brain.Event:2");  // file_version: the first record of every event file
  Record(Event(0, version));
}

void TensorBoardWriter::Record(const std::string& event) {
  std::string length;
  Fixed(length, static_cast<uint64_t>(event.size()));
  std::string frame = length;
  Fixed(frame, Masked(Crc32c(length.data(), length.size())));
  frame += event;
  Fixed(frame, Masked(Crc32c(event.data(), event.size())));
  out_.write(frame.data(), static_cast<std::streamsize>(frame.size()));
  out_.flush();
}

void TensorBoardWriter::Scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values) {
  if (!out_.is_open()) return;
  std::string summary;
  for (const auto& [tag, v] : values) {
    std::string value;
    Bytes(value, 1, tag);
    Varint(value, 2 << 3 | 5);  // simple_value: float
    Fixed(value, static_cast<float>(v));
    Bytes(summary, 1, value);
  }
  std::string rest;
  Bytes(rest, 5, summary);
  Record(Event(step, rest));
}

void TensorBoardWriter::Write(const StepMetrics& m) {
  Scalars(m.step, {{"train/loss", m.loss},
                   {"train/lr", m.lr},
                   {"train/grad_norm", m.grad_norm},
                   {"train/tokens_per_second", m.tokens_per_second()},
                   {"train/step_seconds", m.step_seconds},
                   {"train/mfu", m.mfu},
                   {"train/peak_memory_mib", m.peak_memory_mib}});
  if (m.eval_loss) Scalars(m.step, {{"eval/loss", *m.eval_loss}, {"eval/ppl", m.eval_ppl()}});
}

}  // namespace cornstarch
