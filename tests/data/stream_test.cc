// Streamed llava datasets (data/sample_stream.h, data/dataset_file.h, data/webdataset.h): WebDataset .tar shards
// written by GNU tar (an independent writer: ustar name prefixes, GNU long names, pax path records) give exactly
// the batches of the same samples read from .jsonl; globs and lists of files; each data-parallel rank reads only
// its own files; a mix of datasets draws in proportion to the weights; a dataset resumed from the stream states
// of a step continues with exactly the batches the uninterrupted one gives; and the errors name the field or file.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "cornstarch/data/demo_dataset.h"
#include "cornstarch/data/llava_dataset.h"
#include "cornstarch/data/webdataset.h"
#include "cornstarch/plan/config.h"
#include "tests/error_of.h"
#include "tests/temp_path.h"

using namespace cornstarch;
using cornstarch::testing::ErrorOf;
using cornstarch::testing::TempPath;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

const std::string& DemoDir() {
  static const std::string dir = [] {
    const std::string d = TempPath("stream-demo");
    WriteDemoDataset(d, {});
    return d;
  }();
  return dir;
}

Config StreamConfig(const std::vector<std::string>& extra) {
  std::vector<std::string> o = {
      "data.type=llava", "data.tokenizer=" + DemoDir() + "/tokenizer.model", "data.seq_len=96",
      "model.llm.vocab_size=512", "model.encoders.vision.type=vision", "model.encoders.vision.image_size=32",
      "model.encoders.vision.patch_size=8", "model.encoders.audio.type=audio", "model.encoders.audio.num_frames=32",
      "model.encoders.audio.num_mel_bins=16", "data.prefetch=0", "train.global_batch_size=4",
      "train.micro_batch_size=4"};
  o.insert(o.end(), extra.begin(), extra.end());
  return ParseConfig("", "test", o);
}

std::vector<nlohmann::json> DemoSamples() {
  std::ifstream in(DemoDir() + "/train.jsonl");
  std::vector<nlohmann::json> samples;
  for (std::string line; std::getline(in, line);) samples.push_back(nlohmann::json::parse(line));
  return samples;
}

std::vector<std::string> AsList(const nlohmann::json& j) {
  if (j.is_null()) return {};
  if (j.is_string()) return {j.get<std::string>()};
  return j.get<std::vector<std::string>>();
}

// Samples [first, last) of the demo dataset as a WebDataset shard written by GNU tar in `format`: per sample
// `<key>.json` (the conversation, no media paths) and `<key>.<k>.<ext>` media, under a directory whose path is
// longer than tar's 100-byte name field, so each format's long-name mechanism is exercised.
std::string WriteShard(const std::string& dir, const std::string& name, int first, int last,
                       const std::string& format) {
  const std::vector<nlohmann::json> samples = DemoSamples();
  const std::string stage = dir + "/stage-" + name;
  const std::string sub = std::string(60, 'd') + "/" + std::string(50, 'e');
  fs::create_directories(stage + "/" + sub);
  std::string members;
  for (int i = first; i < last; ++i) {
    char key[32];
    std::snprintf(key, sizeof key, "s%05d", i);
    nlohmann::json conversation = samples[i];
    conversation.erase("image");
    conversation.erase("audio");
    const std::string base = sub + "/" + key;
    std::ofstream(stage + "/" + base + ".json") << conversation.dump();
    members += " " + base + ".json";
    for (const char* kind : {"image", "audio"}) {
      const std::vector<std::string> media = AsList(samples[i].value(kind, nlohmann::json()));
      for (size_t k = 0; k < media.size(); ++k) {
        const std::string member = base + "." + (kind[0] == 'i' ? "" : "a") + std::to_string(k) +
                                   fs::path(media[k]).extension().string();
        fs::copy_file(DemoDir() + "/" + media[k], stage + "/" + member, fs::copy_options::overwrite_existing);
        members += " " + member;
      }
    }
  }
  const std::string shard = dir + "/" + name + ".tar";
  const std::string cmd = "tar --format=" + format + " -cf " + shard + " -C " + stage + members;
  REQUIRE(std::system(cmd.c_str()) == 0);
  return shard;
}

void CheckSameBatch(const Batch& a, const Batch& b) {
  REQUIRE(torch::equal(a.input_ids, b.input_ids));
  REQUIRE(torch::equal(a.labels, b.labels));
  REQUIRE(torch::equal(a.positions, b.positions));
  REQUIRE(torch::equal(a.mask_words, b.mask_words));
  REQUIRE(a.modalities.size() == b.modalities.size());
  for (size_t k = 0; k < a.modalities.size(); ++k) {
    REQUIRE(torch::equal(a.modalities[k].inputs, b.modalities[k].inputs));
    REQUIRE(torch::equal(a.modalities[k].positions, b.modalities[k].positions));
  }
}

}  // namespace

TEST_CASE("WebDataset shards from GNU tar give the batches of the same samples in JSONL", "[data][stream]") {
  const std::string dir = TempPath("shards");
  fs::create_directories(dir);
  // Three shards in the three header formats (sorted names keep the samples' order).
  WriteShard(dir, "a-ustar", 0, 30, "ustar");
  WriteShard(dir, "b-gnu", 30, 60, "gnu");
  WriteShard(dir, "c-pax", 60, 96, "pax");

  std::ifstream in(dir + "/b-gnu.tar", std::ios::binary);
  const std::vector<WebDatasetSample> grouped = GroupWebDataset(ReadTarIndex(in, "b-gnu.tar"));
  REQUIRE(grouped.size() == 30);
  CHECK(grouped[0].key == std::string(60, 'd') + "/" + std::string(50, 'e') + "/s00030");
  CHECK(grouped[0].json.has_value());

  const std::vector<std::string> plain = {"data.shuffle=false", "data.pack=false"};
  std::vector<std::string> tar = plain, jsonl = plain;
  tar.push_back("data.path=" + dir + "/*.tar");
  jsonl.push_back("data.path=" + DemoDir() + "/train.jsonl");
  const LlavaDataset from_tar(StreamConfig(tar), 3), from_jsonl(StreamConfig(jsonl), 3);
  for (int64_t step = 0; step < 24; ++step) {  // every sample once, and the start of the next epoch
    INFO("step " << step);
    CheckSameBatch(from_tar.Get(step * 4, 4), from_jsonl.Get(step * 4, 4));
  }
  // Shuffled and packed, a list of files: every sample once per epoch.
  std::vector<std::string> shuffled = {"data.path=[" + dir + "/c-pax.tar, " + dir + "/a-*.tar, " + dir + "/b-gnu.tar]"};
  const LlavaDataset mixed_order(StreamConfig(shuffled), 3);
  std::set<std::string> seen;
  for (int64_t g = 0; seen.size() < 96; ++g) {
    for (const LlavaDataset::Packed& p : mixed_order.Sequence(g)) REQUIRE(seen.insert(p.where).second);
  }
}

TEST_CASE("each dp rank reads only its own files; the order depends on data.streams alone", "[data][stream]") {
  const std::string dir = TempPath("rank-shards");
  fs::create_directories(dir);
  for (int s = 0; s < 4; ++s) WriteShard(dir, "part-" + std::to_string(s), s * 24, s * 24 + 24, "gnu");
  const std::vector<std::string> o = {"data.path=" + dir + "/part-*.tar", "data.streams=2"};
  const LlavaDataset whole(StreamConfig(o), 7);
  for (int rank = 0; rank < 2; ++rank) {
    const LlavaDataset mine(StreamConfig(o), 7, {rank, 2});
    // Global batch 4 = 2 streams x 2: rank r's sequences are positions 2r, 2r + 1 of every batch.
    for (int64_t step = 0; step < 30; ++step) {
      for (int64_t p = 2 * rank; p < 2 * rank + 2; ++p) {
        for (const LlavaDataset::Packed& s : mine.Sequence(step * 4 + p)) {
          // Stream r holds files r and r + 2 (dealt round-robin).
          const bool own = s.where.find("part-" + std::to_string(rank) + ".tar") != std::string::npos ||
                           s.where.find("part-" + std::to_string(rank + 2) + ".tar") != std::string::npos;
          REQUIRE(own);
        }
      }
      CheckSameBatch(mine.Get(step * 4 + 2 * rank, 2), whole.Get(step * 4 + 2 * rank, 2));
    }
  }
  // One file split among two streams by sample: together they read each sample once per epoch.
  const LlavaDataset split(StreamConfig({"data.path=" + DemoDir() + "/train.jsonl", "data.streams=2"}), 7);
  std::set<std::string> seen;
  for (int64_t g = 0; g < 200 && seen.size() < 96; ++g) {
    for (const LlavaDataset::Packed& p : split.Sequence(g)) seen.insert(p.where);
  }
  CHECK(seen.size() == 96);
}

TEST_CASE("a mix draws from its datasets in proportion to the weights", "[data][stream]") {
  const std::string dir = TempPath("mix");
  fs::create_directories(dir);
  WriteShard(dir, "x", 0, 48, "gnu");
  WriteShard(dir, "y", 48, 96, "gnu");
  const Config c = StreamConfig({"data.mix=[{path: " + dir + "/x.tar, weight: 3}, {path: " + dir +
                                 "/y.tar, weight: 1}]"});
  const LlavaDataset mix(c, 11);
  int64_t from_x = 0, total = 0;
  for (int64_t g = 0; total < 800; ++g) {
    for (const LlavaDataset::Packed& p : mix.Sequence(g)) {
      from_x += p.where.find("/x.tar") != std::string::npos;
      ++total;
    }
  }
  // Binomial(total, 0.75): 0.07 is over 4 standard deviations (0.015), and the draw is seeded, not random.
  CHECK(static_cast<double>(from_x) / total == Approx(0.75).margin(0.07));
}

TEST_CASE("a dataset resumed from a step's stream states continues exactly", "[data][stream]") {
  const std::string dir = TempPath("resume");
  fs::create_directories(dir);
  WriteShard(dir, "x", 0, 40, "gnu");
  WriteShard(dir, "y", 40, 96, "pax");
  for (const std::string& files : {"data.path=" + DemoDir() + "/train.jsonl",
                                   "data.mix=[{path: " + dir + "/x.tar, weight: 2}, {path: " + dir + "/y.tar}]"}) {
    INFO(files);
    const Config c = StreamConfig({files, "data.streams=2"});
    const LlavaDataset uninterrupted(c, 5);
    std::vector<Batch> expected;
    for (int64_t step = 0; step < 40; ++step) expected.push_back(uninterrupted.Get(step * 4, 4));  // past an epoch
    for (const int64_t at : {1, 17, 33}) {
      LlavaDataset resumed(c, 5);
      resumed.Resume(at, uninterrupted.StreamStates(at));
      // Nothing before the step is read again: the step's samples and at most one sample ahead per stream.
      CheckSameBatch(resumed.Get(at * 4, 4), expected[at]);
      int64_t samples = 0;
      for (int64_t p = 0; p < 4; ++p) samples += static_cast<int64_t>(uninterrupted.Sequence(at * 4 + p).size());
      CHECK(resumed.samples_read() <= samples + 2);
      for (int64_t step = at + 1; step < 40; ++step) CheckSameBatch(resumed.Get(step * 4, 4), expected[step]);
    }
    // Another stream count cannot take these states.
    LlavaDataset other(StreamConfig({files, "data.streams=4"}), 5);
    CHECK_THROWS_WITH(other.Resume(3, uninterrupted.StreamStates(3)),
                      "data.streams: the checkpoint holds 2 data streams, this run has 4; resume with data.streams=2");
  }
}

TEST_CASE("streamed data's errors name the field or the file", "[data][stream]") {
  const std::string dir = TempPath("stream-errors");
  fs::create_directories(dir);
  CHECK(ErrorOf([&] { LlavaDataset d(StreamConfig({"data.path=" + dir + "/*.tar"}), 0); }) ==
        "data.path: '" + dir + "/*.tar' matches no file");
  const std::string demo = "data.path=" + DemoDir() + "/train.jsonl";
  CHECK(ErrorOf([&] { LlavaDataset d(StreamConfig({demo, "data.streams=3"}), 0); }) ==
        "data.streams: 3 streams must be a multiple of the dp degree (1) and divide train.global_batch_size=4");
  const std::string f = DemoDir() + "/train.jsonl";
  const std::string three = "data.path=[" + f + ", " + f + ", " + f + "]";
  CHECK(ErrorOf([&] { LlavaDataset d(StreamConfig({three, "data.streams=4", "train.global_batch_size=8"}), 0); }) ==
        "data.path: 3 files cannot be dealt to data.streams=4 streams: give at least as many files, or a number of "
        "files that divides the streams");
  std::ofstream(dir + "/notes.txt") << "x";
  CHECK(ErrorOf([&] { LlavaDataset d(StreamConfig({"data.path=" + dir + "/notes.txt"}), 0); d.Get(0, 1); }) ==
        dir + "/notes.txt: a dataset file must be .json, .jsonl or .tar");
  std::ofstream(dir + "/bad.tar") << std::string(1024, 'x');
  CHECK(ErrorOf([&] { LlavaDataset d(StreamConfig({"data.path=" + dir + "/bad.tar"}), 0); d.Get(0, 1); }) ==
        dir + "/bad.tar: tar header at byte 0: bad checksum (not a tar file, or corrupt)");
  CHECK_THROWS_WITH(StreamConfig({"data.path=" + DemoDir() + "/train.jsonl", "data.mix=[{path: x.tar}]"}),
                    Contains("data.path: llava data needs its files in either data.path or data.mix (not both)"));
  CHECK_THROWS_WITH(StreamConfig({"data.mix=[{path: x.tar, weight: 0}]"}), Contains("data.mix[0].weight: must be"));
}
