// The MFU numerator: model FLOPs of a step, counted by hand for a small model and compared with train/mfu.h.
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include "cornstarch/plan/bitfield_mask.h"
#include "cornstarch/plan/config.h"
#include "cornstarch/data/synthetic_dataset.h"
#include "cornstarch/model/multimodal_model.h"
#include "cornstarch/train/mfu.h"
#include "cornstarch/train/trainer.h"

using namespace cornstarch;

TEST_CASE("step FLOPs equal a hand count: frozen-aware backward, allowed attention pairs only", "[flops]") {
  // Vision encoder (frozen): 1 block, width 16, 2 heads, MLP 32, 16x16 image in 8x8 patches -> 4 tokens.
  // Linear projector 16 -> 32 (trains). LLM (trains): 1 block, width 32, 2 heads of 16, 1 kv head, SwiGLU 64,
  // vocabulary 64, 24 tokens per sequence.
  const Config c = ParseConfig(
      "model:\n"
      "  llm: {vocab_size: 64, hidden_size: 32, num_layers: 1, num_heads: 2, num_kv_heads: 1, intermediate_size: 64}\n"
      "  encoders:\n"
      "    vision: {type: vision, hidden_size: 16, num_layers: 1, num_heads: 2, intermediate_size: 32,\n"
      "             image_size: 16, patch_size: 8, frozen: true, projector: {type: linear}}\n"
      "data: {seq_len: 24, num_classes: 4, max_prompt_tokens: 6}\n"
      "train: {steps: 1, global_batch_size: 2, micro_batch_size: 2}\n"
      "optimizer: {warmup_steps: 0}\n"
      "logging: {metrics_path: '', level: warn, peak_tflops: 1}\n",
      "flops.yaml");
  Trainer trainer(c);
  SyntheticDataset data(c.model, c.data, static_cast<uint64_t>(c.train.seed));
  const Batch batch = data.Get(0, 2);

  // Allowed pairs of the two sequences, pair by pair.
  double pairs = 0;
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < 24; ++i)
      for (int64_t j = 0; j < 24; ++j)
        pairs += MaskAllows(batch.mask_words[b][i].item<int64_t>(), batch.mask_words[b][j].item<int64_t>(), i, j);

  // Forward FLOPs per sample (2 per multiply-add).
  const double patch = 2.0 * 4 * (3 * 8 * 8) * 16;                  // conv as a [4 x 192] x [192 x 16] product
  const double enc_block = 2.0 * 4 * 16 * 48 + 2.0 * 4 * 16 * 16     // qkv, out
                           + 4.0 * (4 * 4) * 16                      // QK^T and PV, all 16 pairs
                           + 2.0 * 4 * 16 * 32 * 2;                  // fc1, fc2
  const double enc_norm = 5.0 * 4 * 16;
  const double projector = 2.0 * 4 * 16 * 32;
  const double embed = 24.0 * 32;
  const double llm_proj = 2.0 * 24 * 32 * (32 + 16 + 16 + 32);       // q, k, v (1 kv head of 16), o
  const double llm_mlp = 2.0 * 24 * 32 * 64 * 3;                     // gate, up, down
  // The head makes logits at the labelled positions only (the fused loss), counted label by label.
  double labelled = 0;
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < 24; ++i) labelled += batch.labels[b][i].item<int64_t>() != -100;
  REQUIRE(labelled > 0);
  const double head = 2.0 * labelled * 32 * 64;
  // Backward: frozen encoder (nothing trainable before it) 0; projector, embed, block and head train: 2F.
  // Attention enters per sequence with that sequence's allowed pairs: 4 * pairs * width.
  const double per_sample_without_attention = patch + enc_block + enc_norm + 3 * projector + 3 * embed +
                                              3 * (llm_proj + llm_mlp);
  const double expected = 2 * per_sample_without_attention + 3 * head + 3 * 4.0 * pairs * 32;
  CHECK(BatchFlops(c.model, trainer.model().spec(), batch) == Approx(expected).epsilon(1e-12));
  // Encoder and projector run once per image: a batch with a third image counts them once more.
  Batch three = batch;
  three.modalities[0].inputs = torch::cat({batch.modalities[0].inputs, batch.modalities[0].inputs.narrow(0, 0, 1)});
  CHECK(BatchFlops(c.model, trainer.model().spec(), three) ==
        Approx(expected + patch + enc_block + enc_norm + 3 * projector).epsilon(1e-12));

  const StepMetrics m = trainer.Step();
  CHECK(m.flops == Approx(expected).epsilon(1e-12));  // the step's one microbatch is this batch
  CHECK(m.mfu == Approx(m.flops / (m.step_seconds * 1e12)).epsilon(1e-9));
  CHECK(m.peak_memory_mib > 10);
}

TEST_CASE("images at their own resolution count their own tokens and attention pairs, image by image", "[flops]") {
  // The model above, its tower taking images at their own resolution. Two images of 3 x 2 and 1 x 1 patches
  // packed into one row: each runs its own tokens through every layer and attends over its own tokens squared.
  const Config c = ParseConfig(
      "model:\n"
      "  llm: {vocab_size: 64, hidden_size: 32, num_layers: 1, num_heads: 2, num_kv_heads: 1, intermediate_size: 64}\n"
      "  encoders:\n"
      "    vision: {type: vision, hidden_size: 16, num_layers: 1, num_heads: 2, intermediate_size: 32,\n"
      "             image_size: 16, patch_size: 8, frozen: true, projector: {type: linear},\n"
      "             dynamic_resolution: true, max_patches: 8}\n"
      "data: {seq_len: 24, num_classes: 4, max_prompt_tokens: 6}\n"
      "train: {steps: 1, global_batch_size: 2, micro_batch_size: 2}\n"
      "optimizer: {warmup_steps: 0}\n"
      "logging: {metrics_path: '', level: warn}\n",
      "flops.yaml");
  const ModelSpec spec = BuildModelSpec(c.model);
  SyntheticDataset data(c.model, c.data, static_cast<uint64_t>(c.train.seed));
  const Batch square = data.Get(0, 2);  // two 2 x 2 images (16 px squares)
  REQUIRE(square.modalities[0].grid.size(0) == 2);
  Batch two = square;
  two.modalities[0] = PackPatches(torch::zeros({7, 192}), {{3, 2}, {1, 1}});
  const auto tower = [](double t) {  // forward FLOPs of one image of t tokens; frozen, nothing before: no backward
    return 2.0 * t * 192 * 16 + 2.0 * t * 16 * 48 + 2.0 * t * 16 * 16 + 4.0 * t * t * 16 + 2.0 * t * 16 * 32 * 2 +
           5.0 * t * 16;
  };
  const auto projector = [](double t) { return 3 * 2.0 * t * 16 * 32; };  // trains: forward and 2F backward
  const double rest = BatchFlops(c.model, spec, square) - 2 * (tower(4) + projector(4));
  CHECK(BatchFlops(c.model, spec, two) ==
        Approx(rest + tower(6) + projector(6) + tower(1) + projector(1)).epsilon(1e-12));
  const std::vector<InstanceLoad> loads = InstanceLoads(two);
  CHECK(loads[0].per_sample == 1);
  CHECK(loads[0].tokens == 3.5);
  CHECK(loads[0].pairs == 18.5);
}
