// Paper-scale MLLMs for the planning benchmarks (configs only; nothing here is trained).
#pragma once

#include <string>
#include <vector>

#include "cornstarch/plan/config.h"

namespace cornstarch::bench {

// "llava-1.5": a frozen ViT-L/14 at 336 px (576 tokens) and a trainable 7B-shaped LLM. "MMM", the paper's
// evaluation setting with its medium sizes (Table 1): Qwen2-Vision-shaped 48/2560 encoder on a 1280x720-sized image
// (~4.6k tokens), a 32/3072 audio encoder on a 2-minute clip (1.5k tokens), an 8B-shaped LLM, 1k text tokens;
// encoders and LLM frozen, projectors trained. Micro-batch 1, global batch 32.
inline Config PaperModel(const std::string& name) {
  std::vector<std::string> o = {"model.llm.vocab_size=32000", "model.llm.hidden_size=4096", "model.llm.num_layers=32",
                                "model.llm.num_heads=32", "model.llm.num_kv_heads=8", "model.llm.intermediate_size=14336",
                                "model.encoders.vision.type=vision", "model.encoders.vision.patch_size=14",
                                "model.encoders.vision.frozen=true", "model.encoders.vision.projector.type=mlp",
                                "train.micro_batch_size=1", "train.global_batch_size=32"};
  auto add = [&](const std::vector<std::string>& more) { o.insert(o.end(), more.begin(), more.end()); };
  if (name == "llava-1.5") {
    add({"model.llm.num_kv_heads=32", "model.llm.intermediate_size=11008", "model.encoders.vision.hidden_size=1024",
         "model.encoders.vision.num_layers=24", "model.encoders.vision.num_heads=16",
         "model.encoders.vision.intermediate_size=4096", "model.encoders.vision.image_size=336", "data.seq_len=2048"});
  } else {
    add({"model.llm.frozen=true", "model.encoders.vision.hidden_size=2560", "model.encoders.vision.num_layers=48",
         "model.encoders.vision.num_heads=20", "model.encoders.vision.intermediate_size=10240",
         "model.encoders.vision.image_size=952", "model.encoders.audio.type=audio",
         "model.encoders.audio.hidden_size=3072", "model.encoders.audio.num_layers=32",
         "model.encoders.audio.num_heads=24", "model.encoders.audio.intermediate_size=12288",
         "model.encoders.audio.num_mel_bins=80", "model.encoders.audio.num_frames=3000",
         "model.encoders.audio.frozen=true", "data.seq_len=7168"});
  }
  return ParseConfig("", name, o);
}

}  // namespace cornstarch::bench
