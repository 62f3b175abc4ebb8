// Does the data loader keep up with training? Generates the demo LLaVA-style dataset (PNG/JPEG images, WAV tones:
// decoding, CLIP preprocessing and Whisper log-mel are the loader's work), then for a tiny and a mid-size model,
// in rounds that alternate the order: the loader alone with 1 and 2 worker threads (sequences/s served back to
// back, after one warm-up batch) and the trainer's consumption on the same data (sequences per second of a step,
// median of the steps after the first). The loader must serve more than the trainer consumes.
//   bazel run -c opt //bench:loader_bench -- [--rounds 3] [--batches 24] [--steps 4]
#include <spdlog/spdlog.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "bench/timing.h"
#include "cornstarch/data/demo_dataset.h"
#include "cornstarch/data/llava_dataset.h"
#include "cornstarch/data/loader.h"
#include "cornstarch/device/torch_runtime.h"
#include "cornstarch/plan/config.h"
#include "cornstarch/train/trainer.h"

using namespace cornstarch;

int main(int argc, char** argv) {
  const int rounds = bench::IntFlag(argc, argv, "--rounds", 3);
  const int batches = bench::IntFlag(argc, argv, "--batches", 24);
  const int steps = bench::IntFlag(argc, argv, "--steps", 4);
  spdlog::set_level(spdlog::level::warn);
  const std::string dir = (std::filesystem::temp_directory_path() / "cornstarch-loader-bench").string();
  WriteDemoDataset(dir, {});
  const std::vector<std::string> data = {"data.path=" + dir + "/train.jsonl", "data.tokenizer=" + dir + "/tokenizer.model",
                                         "logging.metrics_path=", "logging.level=warn", "optimizer.warmup_steps=1",
                                         "train.steps=" + std::to_string(steps)};
  // tiny: configs/tiny-llava-data.yaml as it is. mid: a 224-px SigLIP-style tower (256 tokens an image) and an
  // 8 x 512 LLM over 1024-token sequences.
  const std::map<std::string, std::vector<std::string>> models = {
      {"tiny", {}},
      {"mid", {"model.encoders.vision.image_size=224", "model.encoders.vision.patch_size=14",
               "model.encoders.vision.hidden_size=384", "model.encoders.vision.num_layers=6",
               "model.encoders.vision.intermediate_size=1536", "model.encoders.vision.num_heads=6",
               "model.llm.hidden_size=512", "model.llm.num_layers=8", "model.llm.num_heads=8",
               "model.llm.num_kv_heads=4", "model.llm.intermediate_size=1408", "data.seq_len=1024",
               "train.micro_batch_size=4", "train.global_batch_size=4"}}};
  std::map<std::string, std::vector<double>> rate;  // "model side" -> sequences/s per round
  for (int r = 0; r < rounds; ++r) {
    for (const auto& [model, overrides] : models) {
      std::vector<std::string> o = data;
      o.insert(o.end(), overrides.begin(), overrides.end());
      const Config config = LoadConfig("configs/tiny-llava-data.yaml", o);
      ConfigureTorchRuntime(config.train.num_threads);
      const int64_t micro = config.train.micro_batch_size;
      std::vector<std::string> sides = {"loader, 1 worker", "loader, 2 workers", "trainer"};
      if (r % 2 == 1) std::reverse(sides.begin(), sides.end());
      for (const std::string& side : sides) {
        if (side == "trainer") {
          Trainer trainer(config);
          std::vector<double> per_step;
          for (const StepMetrics& m : trainer.Run()) {
            if (m.step > 1) per_step.push_back(config.train.global_batch_size / m.step_seconds);
          }
          rate[model + "|" + side].push_back(bench::Median(per_step));
          continue;
        }
        const LlavaDataset dataset(config, 0);
        BatchLoader loader(dataset, [micro](int64_t i) { return BatchLoader::Slice{i * micro, micro}; }, 8,
                           side == "loader, 1 worker" ? 1 : 2);
        loader.Next();  // warm-up: threads started, first files opened
        const double s = bench::Seconds([&] {
          for (int b = 0; b < batches; ++b) loader.Next();
        });
        rate[model + "|" + side].push_back(batches * micro / s);
      }
    }
  }
  std::printf("%-6s %-18s %12s %12s %8s\n", "model", "side", "seq/s", "min-max", "rounds");
  for (const auto& [key, v] : rate) {
    const std::string model = key.substr(0, key.find('|')), side = key.substr(key.find('|') + 1);
    std::printf("%-6s %-18s %12.1f %5.1f-%-6.1f %8zu\n", model.c_str(), side.c_str(), bench::Median(v),
                *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end()), v.size());
  }
  return 0;
}
