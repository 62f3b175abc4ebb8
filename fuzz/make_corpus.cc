// Writes the seed corpus of every fuzz target (fuzz/*_fuzz.cc) into DIR/<target>/: valid inputs made by the
// project's own writers, so that fuzzing starts from files that parse and mutates from there.
//   bazel build //fuzz:make_corpus && bazel-bin/fuzz/make_corpus DIR CONFIG.yaml...   (tools/fuzz.sh runs it)
// The first config also trains one step to write a checkpoint (its manifest and sidecar are seeds).
#include <ATen/ATen.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <stdexcept>

#include "cornstarch/data/demo_dataset.h"
#include "cornstarch/io/hf_weights.h"
#include "cornstarch/io/safetensors.h"
#include "cornstarch/plan/config.h"
#include "cornstarch/plan/schedule.h"
#include "cornstarch/train/checkpoint.h"
#include "cornstarch/train/trainer.h"

namespace fs = std::filesystem;
using namespace cornstarch;

namespace {

std::string Slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

void Put(const fs::path& path, const std::string& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: make_corpus DIR [CONFIG.yaml...]\n";
    return 2;
  }
  const fs::path dir = argv[1];
  spdlog::set_level(spdlog::level::warn);
  try {
    // Safetensors: every dtype LibTorch has, scalars, empty tensors, metadata, several tensors.
    const fs::path st = dir / "safetensors_header";
    fs::create_directories(st);
    WriteSafetensors((st / "one.safetensors").string(), {{"w", at::arange(6, at::kFloat).view({2, 3})}});
    WriteSafetensors((st / "mixed.safetensors").string(),
                     {{"a", at::ones({3}, at::kBFloat16)},
                      {"b", at::arange(4, at::kLong)},
                      {"scalar", at::full({}, 7, at::kInt)},
                      {"empty", at::zeros({0, 2}, at::kHalf)},
                      {"mask", at::ones({2, 2}, at::kBool)}},
                     {{"format", "pt"}, {"step", "3"}});
    // A Hugging Face index over those two files, as the exporter writes it.
    WriteHfIndex(st.string(), {"one.safetensors", "mixed.safetensors"});
    Put(dir / "hf_index" / "model.safetensors.index.json", Slurp(st / "model.safetensors.index.json"));
    fs::remove(st / "model.safetensors.index.json");
    // Tokenizer and conversations: the demo dataset's, as JSONL and as one JSON array (the harness reads the
    // first byte as the form: odd for JSONL).
    for (const bool jsonl : {true, false}) {
      const fs::path demo = dir / (jsonl ? "demo-jsonl" : "demo-json");
      DemoDataOptions options;
      options.samples = 6;
      options.jsonl = jsonl;
      WriteDemoDataset(demo.string(), options);
      const std::string text = Slurp(demo / (jsonl ? "train.jsonl" : "train.json"));
      Put(dir / "conversations" / (jsonl ? "demo.jsonl" : "demo.json"), std::string(1, jsonl ? '\1' : '\0') + text);
      if (jsonl) {
        Put(dir / "sentencepiece" / "demo.model", Slurp(demo / "tokenizer.model"));
        // A few of each kind of media file: PNG and JPEG images, WAV clips at two rates.
        std::map<std::string, int> kept;
        for (const fs::directory_entry& e : fs::directory_iterator(demo / "media")) {
          const std::string ext = e.path().extension().string();
          if (kept[ext]++ >= 3) continue;
          Put(dir / (ext == ".wav" ? "audio" : "image") / e.path().filename(), Slurp(e.path()));
        }
        // WebDataset shards of a few samples (a .json member and its media per key), written by GNU tar in each
        // header format the reader knows: ustar, GNU long names, pax records.
        // Keys under a directory longer than tar's 100-byte name field, so each format writes its long names.
        const std::string sub = std::string(110, 'w');
        fs::create_directories(demo / sub);
        std::string members;
        for (int i = 0; i < 3; ++i) {
          const std::string key = sub + "/demo-" + std::to_string(i);
          Put(demo / (key + ".json"), "{\"conversations\": [{\"from\": \"human\", \"value\": \"<image>\"}]}");
          members += " " + key + ".json";
          for (const char* ext : {".png", ".jpg", ".wav"}) {
            const fs::path media = demo / "media" / ("demo-" + std::to_string(i) + ext);
            if (!fs::exists(media)) continue;
            fs::copy_file(media, demo / (key + ext));
            members += " " + key + ext;
          }
        }
        fs::create_directories(dir / "webdataset");
        for (const char* format : {"ustar", "gnu", "pax"}) {
          const std::string cmd = "tar --format=" + std::string(format) + " -cf " +
                                  (dir / "webdataset" / (std::string(format) + ".tar")).string() + " -C " +
                                  demo.string() + members;
          if (std::system(cmd.c_str()) != 0) throw std::runtime_error(cmd + " failed");
        }
      }
      fs::remove_all(demo);
    }
    for (int i = 2; i < argc; ++i) Put(dir / "config" / fs::path(argv[i]).filename(), Slurp(argv[i]));
    // Pipeline schedules of the schedule fuzzer's graphs, compute only and lowered, and the shipped examples.
    const std::vector<StageGraph> graphs = {MakeStageGraph({}, 2, {true, true}),
                                            MakeStageGraph({1, 1}, 2, {true, false, true, true}),
                                            MakeStageGraph({1}, 4, {false, true, true, true, true}, 2)};
    for (size_t k = 0; k < graphs.size(); ++k) {
      for (int m : {1, 2, 4}) {
        const Schedule compute = Generate1F1B(graphs[k], m);
        const std::string name = "g" + std::to_string(k) + "-m" + std::to_string(m);
        Put(dir / "schedule" / (name + ".txt"), FormatSchedule(compute));
        Put(dir / "schedule" / (name + "-lowered.txt"), FormatSchedule(AddSendRecv(graphs[k], compute)));
      }
    }
    for (const auto& file : fs::directory_iterator("configs/schedules")) {
      Put(dir / "schedule" / file.path().filename(), Slurp(file.path()));
    }
    // A checkpoint's manifest and sidecar, from one step of the tiny model (the first config given).
    if (argc > 2) {
      const fs::path ckpt = dir / "ckpt";
      Trainer trainer(LoadConfig(argv[2], {"train.steps=2", "optimizer.warmup_steps=1", "logging.metrics_path=",
                                           "logging.level=warn", "checkpoint.dir=" + ckpt.string()}));
      trainer.Step();
      trainer.Save();
      const fs::path step = ckpt / CheckpointDirName(1);
      Put(dir / "checkpoint_manifest" / "manifest.json", Slurp(step / "manifest.json"));
      Put(dir / "checkpoint_manifest" / "stage-0.json", Slurp(step / "stage-0.json"));
      fs::remove_all(ckpt);
    }
  } catch (const std::exception& e) {
    std::cerr << "make_corpus: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
