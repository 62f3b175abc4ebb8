#include "tests/model/held_per_layer.h"

#include <malloc.h>

#include <numeric>
#include <utility>

#include "cornstarch/base/check.h"
#include "cornstarch/device/autocast.h"
#include "cornstarch/plan/bitfield_mask.h"
#include "cornstarch/plan/encoder_kind.h"

namespace cornstarch {

Config MemoryTestConfig(const std::string& precision, const std::vector<std::string>& more) {
  std::vector<std::string> overrides = {
      "model.encoders.vision.type=vision", "model.encoders.vision.image_size=128",
      "model.encoders.vision.hidden_size=128", "model.encoders.vision.intermediate_size=512",
      "model.encoders.audio.type=audio", "model.encoders.audio.num_frames=512",
      "model.encoders.audio.hidden_size=128", "model.encoders.audio.intermediate_size=512",
      "model.llm.hidden_size=256", "model.llm.num_heads=8", "model.llm.num_kv_heads=4",
      "model.llm.intermediate_size=704", "data.seq_len=1024", "train.precision=" + precision};
  overrides.insert(overrides.end(), more.begin(), more.end());
  return ParseConfig("train: {steps: 10}\noptimizer: {warmup_steps: 2}\n", "memory-test.yaml", overrides);
}

Batch InstancesBatch(const Config& cfg, const std::vector<std::vector<int>>& counts,
                     const std::vector<PatchGrid>& grids) {
  constexpr int64_t kPrompt = 16, kAnswer = 32;
  const int64_t b_count = static_cast<int64_t>(counts.size()), s = cfg.data.seq_len;
  const int num_enc = static_cast<int>(cfg.model.encoders.size());
  torch::manual_seed(7);
  Batch batch;
  batch.input_ids = torch::randint(1, cfg.model.llm.vocab_size, {b_count, s}, torch::kLong);
  batch.labels = torch::full({b_count, s}, -100, torch::kLong);
  batch.positions = torch::arange(s).repeat({b_count, 1});
  batch.mask_words = torch::zeros({b_count, s}, torch::kLong);
  std::vector<std::vector<int64_t>> placed(num_enc);  // flat positions of each encoder's features
  std::vector<std::vector<PatchGrid>> views(num_enc);
  size_t next_grid = 0;
  for (int64_t b = 0; b < b_count; ++b) {
    std::vector<MaskSpan> spans = {{kTextToken, kPrompt}};
    int64_t at = kPrompt;
    for (int k = 0; k < num_enc; ++k) {
      const EncoderConfig& e = cfg.model.encoders[k];
      for (int i = 0; i < counts[b][k]; ++i) {
        int64_t n = EncoderTokens(e);
        if (PackedTower(e)) views[k].push_back(grids.at(next_grid++ % grids.size())), n = views[k].back().patches();
        for (int64_t t = 0; t < n; ++t) placed[k].push_back(b * s + at + t);
        spans.push_back({k, n});
        at += n;
      }
    }
    CS_CHECK(at + kAnswer <= s, "InstancesBatch: sample ", b, " needs ", at + kAnswer, " tokens of ", s);
    batch.labels[b].slice(0, at, at + kAnswer) = batch.input_ids[b].slice(0, at + 1, at + kAnswer + 1);
    spans.push_back({kTextToken, kAnswer});
    spans.push_back({kPadToken, s - at - kAnswer});
    const std::vector<int64_t> words = BuildMaskWords(spans, num_enc);
    batch.mask_words[b] = torch::tensor(words, torch::kLong);
  }
  for (int k = 0; k < num_enc; ++k) {
    const EncoderConfig& e = cfg.model.encoders[k];
    const std::vector<int64_t> one = KindOf(e.type).input_shape(e);
    ModalityInput m;
    if (PackedTower(e)) {
      m = PackPatches(torch::randn({static_cast<int64_t>(placed[k].size()), one.back()}), views[k]);
    } else {
      std::vector<int64_t> shape = {static_cast<int64_t>(placed[k].size()) / EncoderTokens(e)};
      shape.insert(shape.end(), one.begin(), one.end());
      m.inputs = torch::randn(shape);
    }
    m.positions = torch::tensor(placed[k], torch::kLong);
    batch.modalities.push_back(std::move(m));
  }
  return batch;
}

MultimodalModel TpSlice(const ModelConfig& model, uint64_t seed, const TpShard& shard) {
  std::vector<int> all(BuildModelSpec(model).layers.size());
  std::iota(all.begin(), all.end(), 0);
  return MultimodalModel(model, seed, all, shard);
}

double HeldBytes() {
  const struct mallinfo2 m = mallinfo2();
  return static_cast<double>(m.uordblks + m.hblkhd);
}

std::vector<double> HeldPerLayer(MultimodalModel& model, const Batch& batch, Communicator* tp, Precision precision,
                                 bool llm_stand_in, Communicator* cp) {
  const ModelSpec& spec = model.spec();
  const int head = spec.chains[spec.llm_chain()].end - 1;
  std::vector<double> held(spec.layers.size(), 0.0);
  for (int pass = 0; pass < 2; ++pass) {
    std::fill(held.begin(), held.end(), 0.0);
    ForwardContext ctx = model.MakeContext(batch);
    ctx.tp_group = tp;
    ctx.cp_group = cp;
    for (int c = 0; c <= spec.llm_chain(); ++c) {
      const bool llm = c == spec.llm_chain();
      torch::Tensor x = llm ? torch::Tensor() : batch.modalities[c].inputs;  // this loop's: the last output
      int begin = spec.chains[c].begin, end = spec.chains[c].end;
      if (llm && llm_stand_in) {
        x = torch::randn(model.OutputSizes(begin, batch)).requires_grad_(true);
        ++begin, --end;
      }
      int producer = -1;  // the layer that made x's storage (a view's is its input's); -1: none of them
      for (int i = begin; i < end; ++i) {
        const double before = HeldBytes();
        torch::Tensor in = std::move(x);
        {
          const AutocastGuard autocast(torch::kCPU, {precision == Precision::kBf16, torch::kBFloat16});
          x = i == head ? model.HeadLossSum(in, batch, tp) : model.RunLayer(i, in, ctx);
        }
        held[i] = HeldBytes() - before;
        const int made = in.defined() && x.is_alias_of(in) ? producer : i;
        // The input, once this loop lets go of it, is freed unless a graph keeps it: then it was not held on its
        // producer's account.
        const double with_input = HeldBytes();
        in = torch::Tensor();
        if (producer >= 0) held[producer] -= with_input - HeldBytes();
        producer = made;
      }
      for (int i = begin + 1; i < end; ++i) {
        if (!spec.layers[i - 1].needs_graph) held[i] += std::exchange(held[i - 1], 0.0);
      }
      if (!llm) ctx.features.push_back(x);  // the executor keeps a tower's output: its message
      // x holds the graph, so it cannot be let go of here to see.
      if (llm && llm_stand_in) held[end - 1] -= static_cast<double>(x.storage().nbytes());
    }
  }
  return held;
}

}  // namespace cornstarch
