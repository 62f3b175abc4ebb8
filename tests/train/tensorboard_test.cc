// The TensorBoard event file, read back the way TensorBoard reads it: TFRecord frames whose masked CRC-32C of the
// length and of the payload must match (CRC computed here bit by bit, checked on the standard test vector), each an
// Event protobuf with wall time, step, and either the file version or the summary's tag -> float values.
#include <catch2/catch.hpp>
#include <cstring>
#include <fstream>
#include <map>
#include <string>

#include "cornstarch/train/tensorboard.h"
#include "tests/temp_path.h"

using namespace cornstarch;
using cornstarch::testing::TempPath;

namespace {

uint32_t BitwiseCrc32c(const std::string& s) {
  uint32_t crc = 0xffffffffu;
  for (unsigned char c : s) {
    crc ^= c;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82f63b78u & (0u - (crc & 1)));
  }
  return ~crc;
}

uint32_t Unmask(uint32_t m) {
  const uint32_t r = m - 0xa282ead8u;
  return (r >> 17) | (r << 15);
}

struct Reader {
  const std::string& s;
  size_t at = 0;
  uint64_t Varint() {
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      const uint8_t b = static_cast<uint8_t>(s.at(at++));
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
  }
  template <class T>
  T Fixed() {
    T v;
    std::memcpy(&v, s.data() + at, sizeof(T));
    at += sizeof(T);
    return v;
  }
  std::string Bytes() {
    const uint64_t n = Varint();
    std::string b = s.substr(at, n);
    at += n;
    return b;
  }
};

struct Event {
  double wall_time = 0;
  int64_t step = -1;
  std::string version;
  std::map<std::string, float> values;
};

Event ParseEvent(const std::string& bytes) {
  Event e;
  Reader r{bytes};
  while (r.at < bytes.size()) {
    const uint64_t tag = r.Varint();
    if (tag == (1 << 3 | 1)) e.wall_time = r.Fixed<double>();
    else if (tag == (2 << 3 | 0)) e.step = static_cast<int64_t>(r.Varint());
    else if (tag == (3 << 3 | 2)) e.version = r.Bytes();
    else if (tag == (5 << 3 | 2)) {
      const std::string summary = r.Bytes();
      Reader sr{summary};
      while (sr.at < summary.size()) {
        REQUIRE(sr.Varint() == (1 << 3 | 2));
        const std::string value = sr.Bytes();
        Reader vr{value};
        REQUIRE(vr.Varint() == (1 << 3 | 2));
        const std::string name = vr.Bytes();
        REQUIRE(vr.Varint() == (2 << 3 | 5));
        e.values[name] = vr.Fixed<float>();
      }
    } else {
      FAIL("unexpected field tag " << tag);
    }
  }
  return e;
}

}  // namespace

TEST_CASE("CRC-32C matches the standard check value", "[tensorboard]") {
  CHECK(Crc32c("123456789", 9) == 0xe3069283u);
  CHECK(BitwiseCrc32c("123456789") == 0xe3069283u);
  const std::string s = "any payload \x01\x02\xff";
  CHECK(Crc32c(s.data(), s.size()) == BitwiseCrc32c(s));
}

TEST_CASE("the event file holds framed, checksummed events with the per-step scalars", "[tensorboard]") {
  const std::string dir = TempPath("tb");
  std::string path;
  {
    TensorBoardWriter w(dir);
    path = w.path();
    StepMetrics m;
    for (int64_t step = 1; step <= 3; ++step) {
      m.step = step;
      m.loss = 5.0 / step;
      m.lr = 1e-3 * step;
      m.grad_norm = 0.5;
      m.tokens = 1000;
      m.step_seconds = 0.25;
      m.mfu = 0.125;
      w.Write(m);
    }
  }
  REQUIRE(path.rfind(dir + "/events.out.tfevents.", 0) == 0);
  std::ifstream in(path, std::ios::binary);
  const std::string file((std::istreambuf_iterator<char>(in)), {});
  Reader r{file};
  std::vector<Event> events;
  while (r.at < file.size()) {
    const std::string length = file.substr(r.at, 8);
    const uint64_t n = r.Fixed<uint64_t>();
    REQUIRE(Unmask(r.Fixed<uint32_t>()) == BitwiseCrc32c(length));
    const std::string payload = file.substr(r.at, n);
    r.at += n;
    REQUIRE(Unmask(r.Fixed<uint32_t>()) == BitwiseCrc32c(payload));
    events.push_back(ParseEvent(payload));
  }
  REQUIRE(events.size() == 4);
  CHECK(events[0].version == "brain.Event:2");
  CHECK(events[0].wall_time > 1.6e9);  // seconds since the epoch
  for (int64_t step = 1; step <= 3; ++step) {
    const Event& e = events[step];
    CHECK(e.step == step);
    CHECK(e.values.size() == 7);
    CHECK(e.values.at("train/loss") == static_cast<float>(5.0 / step));
    CHECK(e.values.at("train/lr") == static_cast<float>(1e-3 * step));
    CHECK(e.values.at("train/tokens_per_second") == 4000.0f);
    CHECK(e.values.at("train/mfu") == 0.125f);
  }
  TensorBoardWriter off("");
  CHECK(off.path().empty());
}
