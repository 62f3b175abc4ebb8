// The safetensors reader and writer: round trips over every dtype LibTorch has, slices read along dim 0 or 1
// against narrow(), a file built byte by byte as the format describes it, and hand-made broken files, each of which
// must fail at open with the file (and the tensor at fault) named.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>

#include "cornstarch/io/hf_index.h"
#include "cornstarch/io/safetensors.h"
#include "cornstarch/base/check.h"
#include "tests/error_of.h"
#include "tests/temp_path.h"

using namespace cornstarch;
using Catch::Matchers::Contains;
using cornstarch::testing::TempPath;

namespace {

// 8-byte little-endian length, the header text, then the data bytes.
std::string FileBytes(const std::string& header, const std::string& data, uint64_t length = UINT64_MAX) {
  if (length == UINT64_MAX) length = header.size();
  std::string out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((length >> (8 * i)) & 0xff));
  return out + header + data;
}

std::string WriteFixture(const std::string& name, const std::string& bytes) {
  const std::string path = TempPath(name);
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

std::string OpenError(const std::string& name, const std::string& bytes) {
  const std::string path = WriteFixture(name, bytes);
  return cornstarch::testing::ErrorOf([&] { SafetensorsFile f(path); });
}

}  // namespace

TEST_CASE("round trip over every dtype, empty and 0-d tensors, with metadata", "[safetensors]") {
  torch::manual_seed(0);
  const std::vector<std::pair<std::string, torch::Tensor>> tensors = {
      {"f32", torch::randn({3, 5})},
      {"f64", torch::randn({2}, torch::kDouble)},
      {"f16", torch::randn({4, 1}).to(torch::kHalf)},
      {"bf16", torch::randn({7}).to(torch::kBFloat16)},
      {"i64", torch::arange(-5, 6, torch::kLong)},
      {"i32", torch::arange(0, 9, torch::kInt).reshape({3, 3})},
      {"i16", torch::arange(-3, 3, torch::kShort)},
      {"i8", torch::arange(-4, 4, torch::kChar)},
      {"u8", torch::arange(0, 255, torch::kByte)},
      {"bool", torch::tensor({true, false, true})},
      {"empty", torch::empty({0, 4})},
      {"scalar", torch::tensor(2.5)},
      {"strided", torch::randn({4, 6}).t()},  // non-contiguous input
  };
  const std::string path = TempPath("roundtrip.safetensors");
  WriteSafetensors(path, tensors, {{"format", "pt"}, {"step", "12"}});
  const SafetensorsFile f(path);
  CHECK(f.header().metadata == std::map<std::string, std::string>{{"format", "pt"}, {"step", "12"}});
  CHECK(f.header().data_start % 8 == 0);
  CHECK(f.header().tensors.size() == tensors.size());
  for (const auto& [name, t] : tensors) {
    INFO(name);
    const torch::Tensor back = f.Get(name);
    CHECK(back.scalar_type() == t.scalar_type());
    CHECK(back.sizes() == t.sizes());
    CHECK(torch::equal(back, t));
  }
  CHECK(f.header().tensors.at("bf16").dtype == "BF16");
  CHECK(f.header().tensors.at("u8").dtype == "U8");
  CHECK_THROWS_WITH(f.Get("missing"), path + ": no tensor 'missing'");
}

TEST_CASE("a slice along dim 0 or 1 equals the same narrow of the whole tensor, every range", "[safetensors]") {
  torch::manual_seed(1);
  const std::vector<std::pair<std::string, torch::Tensor>> tensors = {
      {"f32", torch::randn({6, 10})},
      {"bf16", torch::randn({4, 6, 3}).to(torch::kBFloat16)},
      {"i64", torch::arange(0, 12, torch::kLong)},
  };
  const std::string path = TempPath("slices.safetensors");
  WriteSafetensors(path, tensors);
  const SafetensorsFile f(path);
  int checked = 0;
  for (const auto& [name, t] : tensors) {
    for (int dim = 0; dim < std::min<int>(2, static_cast<int>(t.dim())); ++dim) {
      for (int64_t begin = 0; begin <= t.size(dim); ++begin) {
        for (int64_t length = 0; begin + length <= t.size(dim); ++length) {
          INFO(name << " dim " << dim << " [" << begin << ", " << begin + length << ")");
          const torch::Tensor slice = f.GetSlice(name, dim, begin, length);
          CHECK(slice.scalar_type() == t.scalar_type());
          CHECK(torch::equal(slice, t.narrow(dim, begin, length)));
          ++checked;
        }
      }
    }
  }
  CHECK(checked > 100);
  CHECK_THROWS_WITH(f.GetSlice("f32", 1, 8, 3),
                    Contains(path + ": tensor 'f32' of shape [6, 10] has no elements [8, 11) along dim 1"));
  CHECK_THROWS_WITH(f.GetSlice("i64", 1, 0, 1), Contains("along dim 1"));
}

TEST_CASE("a file built byte by byte from the format description reads back", "[safetensors]") {
  // Two tensors, the second at an offset that is not 8-byte aligned, metadata, header padded with spaces.
  const std::string header =
      R"({"a":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]},"b":{"dtype":"U8","shape":[3],)"
      R"("data_offsets":[16,19]},"c":{"dtype":"F32","shape":[1],"data_offsets":[19,23]},"__metadata__":{"k":"v"}}   )";
  std::string data;
  for (int32_t v : {1, -2, 3, 40000}) data.append(reinterpret_cast<const char*>(&v), 4);
  data += std::string("\x07\x08\x09", 3);
  const float pi = 3.25f;
  data.append(reinterpret_cast<const char*>(&pi), 4);
  const SafetensorsFile f(WriteFixture("handmade.safetensors", FileBytes(header, data)));
  CHECK(torch::equal(f.Get("a"), torch::tensor({1, -2, 3, 40000}, torch::kInt).reshape({2, 2})));
  CHECK(torch::equal(f.Get("b"), torch::tensor({7, 8, 9}, torch::kByte)));
  CHECK(f.Get("c").item<float>() == 3.25f);
  CHECK(f.header().metadata.at("k") == "v");
}

TEST_CASE("broken files fail at open with the file and tensor named", "[safetensors]") {
  const std::string ok = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string eight(8, '\0');
  CHECK(OpenError("ok.st", FileBytes(ok, eight)) == "no error");
  CHECK_THAT(OpenError("short.st", "abc"), Contains("short.st: not a safetensors file: 3 bytes"));
  CHECK_THAT(OpenError("long.st", FileBytes(ok, eight, 4096)),
             Contains("long.st: header length 4096 runs past the end of the file"));
  CHECK_THAT(OpenError("utf8.st", FileBytes("{\"w\xff\":{}}", "")), Contains("utf8.st header: malformed JSON"));
  CHECK_THAT(OpenError("json.st", FileBytes("{\"w\": [1, 2", "")), Contains("json.st header: malformed JSON"));
  // Numbers past double's range, and nesting deep enough to exhaust the stack when the document is destroyed.
  CHECK_THAT(OpenError("range.st", FileBytes("{\"w\": -5E555}", "")), Contains("range.st header: malformed JSON"));
  CHECK_THAT(OpenError("deep.st", FileBytes("{\"w\": " + std::string(100000, '[') + "}", "")),
             Contains("deep.st header: JSON nested deeper than 64 levels"));
  CHECK_THAT(OpenError("array.st", FileBytes("[1]", "")), Contains("array.st: the header must be a JSON object"));
  CHECK_THAT(OpenError("dtype.st", FileBytes(R"({"w":{"dtype":"Q7","shape":[2],"data_offsets":[0,8]}})", eight)),
             Contains("dtype.st: tensor 'w': unknown dtype 'Q7'"));
  CHECK_THAT(OpenError("shape.st", FileBytes(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", eight)),
             Contains("shape.st: tensor 'w': shape must be an array of non-negative integers"));
  CHECK_THAT(OpenError("fields.st", FileBytes(R"({"w":{"dtype":"F32","shape":[2]}})", eight)),
             Contains("fields.st: tensor 'w': expected an object with dtype, shape and data_offsets"));
  CHECK_THAT(OpenError("size.st", FileBytes(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight)),
             Contains("size.st: tensor 'w': data_offsets [0, 8] hold 8 bytes, but F32 [3] needs 12"));
  CHECK_THAT(OpenError("truncated.st", FileBytes(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", eight)),
             Contains("truncated.st: tensor 'w': data_offsets [0, 16] run past the end of the data (8 bytes)"));
  CHECK_THAT(OpenError("reversed.st", FileBytes(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", eight)),
             Contains("reversed.st: tensor 'w': data_offsets [8, 0] end before they begin"));
  CHECK_THAT(OpenError("overlap.st", FileBytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                               R"("b":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})",
                                               std::string(6, '\0'))),
             Contains("overlap.st: tensors 'a' and 'b' overlap"));
  CHECK_THAT(OpenError("hole.st", FileBytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                            R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                                            std::string(12, '\0'))),
             Contains("hole.st: bytes [4, 8) of the data belong to no tensor (before 'b')"));
  CHECK_THAT(OpenError("trailing.st", FileBytes(ok, std::string(12, '\0'))),
             Contains("trailing.st: the last 4 bytes of the data belong to no tensor"));
  CHECK_THAT(OpenError("meta.st", FileBytes(R"({"__metadata__":{"k":1}})", "")),
             Contains("meta.st: __metadata__ value of 'k' must be a string"));
  CHECK_THAT(OpenError("missing.st", ""), Contains("missing.st: not a safetensors file: 0 bytes"));
  CHECK_THROWS_WITH(SafetensorsFile(TempPath("does-not-exist.st")), Contains("does-not-exist.st: cannot open"));
  // Valid format, but a dtype this LibTorch cannot hold: the error comes when the tensor is read.
  const SafetensorsFile u16(WriteFixture("u16.st", FileBytes(R"({"w":{"dtype":"U16","shape":[4],"data_offsets":[0,8]}})", eight)));
  CHECK_THROWS_WITH(u16.Get("w"), Contains("u16.st: tensor 'w': dtype U16 has no LibTorch equivalent"));
}

TEST_CASE("writes are atomic: no temporary left behind, a failed write leaves the old file", "[safetensors]") {
  const std::string path = TempPath("atomic.safetensors");
  WriteSafetensors(path, {{"x", torch::ones({2})}});
  CHECK_THROWS(WriteSafetensors(TempPath("no-such-dir/x.safetensors"), {{"x", torch::ones({2})}}));
  WriteFileAtomically(path + ".txt", "hello");
  std::ifstream in(path + ".txt");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(text == "hello");
  CHECK(!std::ifstream(path + ".tmp." + std::to_string(getpid())).good());
  CHECK(torch::equal(SafetensorsFile(path).Get("x"), torch::ones({2})));
}

TEST_CASE("a Hugging Face index maps tensors to shard files inside its directory", "[safetensors]") {
  const std::map<std::string, std::string> map = ParseHfIndex(
      R"({"metadata": {}, "weight_map": {"a.weight": "model-00001-of-00002.safetensors", "b": "sub/b.safetensors"}})",
      "i.json");
  CHECK(map == std::map<std::string, std::string>{{"a.weight", "model-00001-of-00002.safetensors"},
                                                  {"b", "sub/b.safetensors"}});
  auto error = [](const std::string& text) { return testing::ErrorOf([&] { ParseHfIndex(text, "i.json"); }); };
  CHECK_THAT(error(R"({"weight_map": {"a": "../../secret.safetensors"}})"),
             Contains("i.json: malformed index: the file of 'a' must be a path inside the directory"));
  CHECK_THAT(error(R"({"weight_map": {"a": "/etc/x.safetensors"}})"), Contains("the file of 'a' must be a path"));
  CHECK_THAT(error(R"({"weight_map": {"a": 3}})"), Contains("the file of 'a' must be a path"));
  CHECK_THAT(error(R"({"weights": {}})"),
             Contains("i.json: malformed index: expected an object with a \"weight_map\""));
  CHECK_THAT(error(R"({"weight_map": )"), Contains("i.json: malformed JSON"));
}
